"""Write GPU types you do not have: a Gavel-format co-location file whose
types are measured ones with every model's speed, every pair's interference
and which pairs can co-run drawn afresh (`gpufair.scheduler.sim.perturb`).

    .venv/bin/python bench/scheduler/perturb_colocation.py --out synth.json \\
        --gpu-types k80,p100 --seeds 1,2,3 [--forbid 0.15]
    .venv/bin/python bench/scheduler/run_bench.py --colocation synth.json ...

Each type in the output is named `<type>-s<seed>`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from gpufair.common.errors import InvalidArgument
from gpufair.common.files import write_whole
from gpufair.scheduler.sim.colocation import read_file
from gpufair.scheduler.sim.perturb import perturb_file


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--colocation", default=str(Path(__file__).resolve().parents[2].parent
                                                / "shared" / "data" / "colocation"
                                                / "gavel-physical-k80-p100.json"),
                    help="Gavel-format file to start from (default: the shared one)")
    ap.add_argument("--gpu-types", default="", help="types to redraw, comma-separated "
                                                    "(default: all in the file)")
    ap.add_argument("--seeds", default="1", help="one redrawn type per seed, comma-separated")
    ap.add_argument("--forbid", type=float, default=0.15,
                    help="chance that a 1-GPU pair that co-ran can no longer (default 0.15)")
    ap.add_argument("--out", required=True, help="the file to write")
    args = ap.parse_args(argv)
    try:
        seeds = tuple(int(s) for s in args.seeds.split(","))
    except ValueError:
        print(f"--seeds: want comma-separated integers, not {args.seeds!r}", file=sys.stderr)
        return 2
    names = tuple(n for n in args.gpu_types.split(",") if n)
    try:
        raw = read_file(args.colocation)  # its errors name the file
        out = perturb_file(raw, names, seeds, args.forbid)
    except InvalidArgument as e:
        print(e, file=sys.stderr)
        return 2
    target = Path(args.out)
    try:
        write_whole(target, json.dumps(out))
    except OSError as e:
        print(f"cannot write {target}: {e.strerror or e}", file=sys.stderr)
        return 2
    print(f"wrote {', '.join(out)} to {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
