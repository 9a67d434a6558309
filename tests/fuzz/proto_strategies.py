"""Hypothesis strategies that build any protobuf message from its descriptor, biased to hostile values."""

from __future__ import annotations

from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from hypothesis import strategies as st

F = FieldDescriptor
EDGE_STRINGS = ["", " ", "..", "../etc/passwd", "/abs/path", "a/b", "job\x00id", "\u202e\u65e5\u672c\U0001f600", "x" * 100_000,
                "s3://bucket/../../escape", "s3://b/", "minio://bkt/key", "s3://" + "a" * 300 + "/k", "%2e%2e/x", "C:\\win", "\n"]
_INT_RANGES = {F.TYPE_INT32: (-(2**31), 2**31 - 1), F.TYPE_SINT32: (-(2**31), 2**31 - 1), F.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
               F.TYPE_INT64: (-(2**63), 2**63 - 1), F.TYPE_SINT64: (-(2**63), 2**63 - 1), F.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
               F.TYPE_UINT32: (0, 2**32 - 1), F.TYPE_FIXED32: (0, 2**32 - 1), F.TYPE_UINT64: (0, 2**64 - 1), F.TYPE_FIXED64: (0, 2**64 - 1)}


def _ints(lo: int, hi: int) -> st.SearchStrategy[int]:
    edges = [v for v in (0, 1, -1, 2, 255, 10_000, 2**31 - 1, -(2**31), 2**53, lo, hi) if lo <= v <= hi]
    return st.one_of(st.sampled_from(edges), st.integers(lo, hi), st.integers(max(lo, -100), min(hi, 100)))


def _scalar(field: FieldDescriptor) -> st.SearchStrategy[Any]:
    t = field.type
    if t == F.TYPE_STRING:
        return st.one_of(st.sampled_from(EDGE_STRINGS), st.text(max_size=40))
    if t == F.TYPE_BYTES:
        return st.binary(max_size=64)
    if t == F.TYPE_BOOL:
        return st.booleans()
    if t in (F.TYPE_DOUBLE, F.TYPE_FLOAT):
        edges = [0.0, -0.0, -1.0, 1e-12, 1e300, -1e300, float("nan"), float("inf"), float("-inf")]
        return st.one_of(st.sampled_from(edges), st.floats(width=32 if t == F.TYPE_FLOAT else 64))
    if t == F.TYPE_ENUM:
        return st.one_of(st.sampled_from([v.number for v in field.enum_type.values]), st.integers(-5, 1000))
    return _ints(*_INT_RANGES[t])


def _field_value(field: FieldDescriptor, depth: int) -> st.SearchStrategy[Any]:
    if field.type == F.TYPE_MESSAGE:
        return messages(field.message_type, depth + 1)
    return _scalar(field)


def _is_map(field: FieldDescriptor) -> bool:
    return field.type == F.TYPE_MESSAGE and field.message_type.GetOptions().map_entry


@st.composite
def _message(draw: st.DrawFn, desc: Descriptor, depth: int) -> Message:
    from google.protobuf import message_factory

    msg = message_factory.GetMessageClass(desc)()
    for field in desc.fields:
        if depth > 3 or not draw(st.booleans()):
            continue
        if _is_map(field):
            kf, vf = field.message_type.fields_by_name["key"], field.message_type.fields_by_name["value"]
            entries = draw(st.dictionaries(_scalar(kf), _field_value(vf, depth), max_size=3))
            for k, v in entries.items():
                if vf.type == F.TYPE_MESSAGE:
                    getattr(msg, field.name)[k].CopyFrom(v)
                else:
                    getattr(msg, field.name)[k] = v
        elif field.is_repeated:
            # Sometimes huge: a hostile caller sends many elements.
            size = draw(st.sampled_from([0, 1, 2, 3, 5000])) if field.type != F.TYPE_MESSAGE else draw(st.sampled_from([0, 1, 2, 300]))
            element = _field_value(field, depth)
            first = draw(st.lists(element, min_size=min(size, 3), max_size=min(size, 3)))
            values = (first * (size // max(len(first), 1) + 1))[:size] if first else []
            target = getattr(msg, field.name)
            if field.type == F.TYPE_MESSAGE:
                for v in values:
                    target.add().CopyFrom(v)
            else:
                target.extend(values)
        elif field.type == F.TYPE_MESSAGE:
            getattr(msg, field.name).CopyFrom(draw(messages(field.message_type, depth + 1)))
        else:
            setattr(msg, field.name, draw(_scalar(field)))
    return msg


def messages(desc: Descriptor, depth: int = 0) -> st.SearchStrategy[Message]:
    """Any message of type `desc`, each field present or absent, values biased to edge cases."""
    return _message(desc, depth)
