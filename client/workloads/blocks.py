"""Built-in zoo models in plain torch.nn, small enough for CPU runs.

Each keeps its family's structure (AlexNet's 5 conv + 3 FC, ResNet's residual
basic blocks or bottlenecks, ResNeXt's grouped-conv bottlenecks, DenseNet's
dense blocks and transitions) with a CIFAR-style stem so 32x32 inputs work.
`width` scales every channel count; at width 16 AlexNet has its real channels.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn


def _conv_bn(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1) -> list[nn.Module]:
    return [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]


class AlexNetSmall(nn.Module):
    """AlexNet's shape (5 conv, 3 FC with dropout) for small inputs."""

    def __init__(self, num_classes: int, image_size: int, width: int) -> None:
        super().__init__()
        c = [width * m for m in (4, 12, 24, 16, 16)]
        self.features = nn.Sequential(
            nn.Conv2d(3, c[0], 5, 1, 2), nn.ReLU(inplace=True), nn.MaxPool2d(2),
            nn.Conv2d(c[0], c[1], 5, 1, 2), nn.ReLU(inplace=True), nn.MaxPool2d(2),
            nn.Conv2d(c[1], c[2], 3, 1, 1), nn.ReLU(inplace=True),
            nn.Conv2d(c[2], c[3], 3, 1, 1), nn.ReLU(inplace=True),
            nn.Conv2d(c[3], c[4], 3, 1, 1), nn.ReLU(inplace=True),
            nn.AdaptiveMaxPool2d(2),
        )
        hidden = width * 64
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Dropout(0.5), nn.Linear(c[4] * 4, hidden), nn.ReLU(inplace=True),
            nn.Dropout(0.5), nn.Linear(hidden, hidden), nn.ReLU(inplace=True),
            nn.Linear(hidden, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


class _Basic(nn.Module):
    expansion = 1

    def __init__(self, cin: int, planes: int, stride: int, groups: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            *_conv_bn(cin, planes, 3, stride), nn.ReLU(inplace=True), *_conv_bn(planes, planes, 3)
        )
        self.short = _shortcut(cin, planes, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(x) + self.short(x))


class _Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin: int, planes: int, stride: int, groups: int) -> None:
        super().__init__()
        # ResNeXt-32x4d widens the grouped 3x3 to 2x planes; keep it divisible by groups.
        mid = planes if groups == 1 else -(-2 * planes // groups) * groups
        out = planes * self.expansion
        self.body = nn.Sequential(
            *_conv_bn(cin, mid, 1), nn.ReLU(inplace=True),
            *_conv_bn(mid, mid, 3, stride, groups), nn.ReLU(inplace=True),
            *_conv_bn(mid, out, 1),
        )
        self.short = _shortcut(cin, out, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(x) + self.short(x))


def _shortcut(cin: int, cout: int, stride: int) -> nn.Module:
    if stride == 1 and cin == cout:
        return nn.Identity()
    return nn.Sequential(*_conv_bn(cin, cout, 1, stride))


class ResNetSmall(nn.Module):
    """ResNet (basic blocks or bottlenecks) and ResNeXt (grouped bottlenecks)."""

    def __init__(
        self,
        num_classes: int,
        width: int,
        layers: Sequence[int],
        *,
        bottleneck: bool,
        groups: int = 1,
    ) -> None:
        super().__init__()
        block = _Bottleneck if bottleneck else _Basic
        stages: list[nn.Module] = [*_conv_bn(3, width, 3), nn.ReLU(inplace=True)]
        cin = width
        for i, count in enumerate(layers):
            planes = width * 2**i
            for j in range(count):
                stages.append(block(cin, planes, 2 if (i > 0 and j == 0) else 1, groups))
                cin = planes * block.expansion
        self.features = nn.Sequential(*stages, nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.features(x))


class _DenseLayer(nn.Module):
    def __init__(self, cin: int, growth: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.BatchNorm2d(cin), nn.ReLU(inplace=True), nn.Conv2d(cin, 4 * growth, 1, bias=False),
            nn.BatchNorm2d(4 * growth), nn.ReLU(inplace=True),
            nn.Conv2d(4 * growth, growth, 3, padding=1, bias=False),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([x, self.body(x)], 1)


class DenseNetSmall(nn.Module):
    """DenseNet-BC: dense blocks (growth = width/2) joined by halving transitions."""

    def __init__(self, num_classes: int, width: int, blocks: Sequence[int]) -> None:
        super().__init__()
        growth = max(2, width // 2)
        c = 2 * growth
        parts: list[nn.Module] = [nn.Conv2d(3, c, 3, padding=1, bias=False)]
        for i, count in enumerate(blocks):
            for _ in range(count):
                parts.append(_DenseLayer(c, growth))
                c += growth
            if i < len(blocks) - 1:
                parts += [nn.BatchNorm2d(c), nn.ReLU(inplace=True),
                          nn.Conv2d(c, c // 2, 1, bias=False), nn.AvgPool2d(2)]
                c //= 2
        parts += [nn.BatchNorm2d(c), nn.ReLU(inplace=True), nn.AdaptiveAvgPool2d(1), nn.Flatten()]
        self.features = nn.Sequential(*parts)
        self.fc = nn.Linear(c, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.features(x))


class SmallCnn(nn.Module):
    """Three conv layers and a linear head: the quick-run CNN."""

    def __init__(self, num_classes: int, width: int) -> None:
        super().__init__()
        self.net = nn.Sequential(
            *_conv_bn(3, width, 3), nn.ReLU(inplace=True), nn.MaxPool2d(2),
            *_conv_bn(width, 2 * width, 3), nn.ReLU(inplace=True), nn.MaxPool2d(2),
            nn.Conv2d(2 * width, 4 * width, 3, padding=1), nn.ReLU(inplace=True),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4 * width, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class TinyMlp(nn.Module):
    """Flatten and two hidden layers: the quickest model."""

    def __init__(self, num_classes: int, image_size: int, hidden: int) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Flatten(), nn.Linear(3 * image_size * image_size, hidden), nn.ReLU(inplace=True),
            nn.Linear(hidden, hidden), nn.ReLU(inplace=True), nn.Linear(hidden, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)
