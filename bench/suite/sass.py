"""Static structure of a kernel's SASS (``cuobjdump -sass``): instructions, loops and their nesting,
the input of :mod:`.gpu_model`'s estimates."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

_INSTRUCTION = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)((?:\.[A-Za-z0-9_]+)*)([^;]*);")
_TARGET = re.compile(r"0x([0-9a-f]+)")
#: tensor-core MMA opcodes (warp-level HMMA on sm_80/sm_90, warpgroup-level HGMMA on sm_90)
MMA_OPS = ("HMMA", "HGMMA", "IMMA", "IGMMA", "DMMA")


@dataclass
class Instruction:
    address: int
    op: str          # the opcode without modifiers, e.g. "FFMA"
    full: str        # with modifiers, e.g. "HGMMA.64x64x8.F32.TF32"
    target: int | None = None  # a branch's target address


@dataclass
class Loop:
    """A loop of the listing: a backward branch at ``end`` to ``start``. ``ops`` counts the
    instructions of the body that are in no nested loop; ``depth`` is 1 for an outermost loop."""

    start: int
    end: int
    depth: int = 1
    ops: dict[str, int] = field(default_factory=dict)
    inclusive: dict[str, int] = field(default_factory=dict)
    mma: list[str] = field(default_factory=list)

    def has(self, *ops: str) -> bool:
        """Whether the body (nested loops included) holds any of ``ops``."""
        return any(self.inclusive.get(o, 0) for o in ops)

    @property
    def size(self) -> int:
        return sum(self.inclusive.values())


@dataclass
class Listing:
    """Instructions, loops (outermost first, in address order) and the instructions outside every loop."""

    instructions: list[Instruction]
    loops: list[Loop]
    top: dict[str, int]
    top_mma: list[str]

    @property
    def half_mma(self) -> bool:
        """Whether the tensor-core instructions take 16-bit operands (``.F16`` / ``.BF16``), which run
        at twice the TF32 rate."""
        names = self.top_mma + [m for l in self.loops for m in l.mma]
        return bool(names) and all("TF32" not in m for m in names)


def parse(sass: str) -> Listing:
    """The instructions and loops of a one-kernel SASS listing (the trailing self-branch that ends
    every kernel is not a loop)."""
    ins = [Instruction(int(m.group(1), 16), m.group(3), m.group(3) + m.group(4), _branch_target(m))
           for m in _INSTRUCTION.finditer(sass)]
    spans = []
    for m in _INSTRUCTION.finditer(sass):
        if m.group(3) == "BRA":
            t = _TARGET.search(m.group(5))
            addr = int(m.group(1), 16)
            if t and int(t.group(1), 16) < addr:
                spans.append((int(t.group(1), 16), addr))
    loops = sorted((Loop(s, e) for s, e in set(spans)), key=lambda l: (l.start, -l.end))
    for l in loops:
        l.depth = 1 + sum(o.start <= l.start and l.end <= o.end and o is not l for o in loops)
    top: dict[str, int] = {}
    top_mma: list[str] = []
    for i in ins:
        around = [l for l in loops if l.start <= i.address <= l.end]
        for l in around:
            l.inclusive[i.op] = l.inclusive.get(i.op, 0) + 1
        inner = max(around, key=lambda l: l.depth) if around else None
        ops, mma = (inner.ops, inner.mma) if inner else (top, top_mma)
        ops[i.op] = ops.get(i.op, 0) + 1
        if i.op in MMA_OPS:
            mma.append(i.full)
    return Listing(ins, loops, top, top_mma)


def _branch_target(m: re.Match) -> int | None:
    t = _TARGET.search(m.group(5)) if m.group(3) == "BRA" else None
    return int(t.group(1), 16) if t else None


def skips(listing: Listing, loop: Loop) -> list[Instruction]:
    """The forward branches of ``loop``'s own body to its tail (the farthest target inside the loop,
    past every nested loop): the ``if``s that end an iteration early, in address order."""
    forward = [i for i in listing.instructions if loop.start <= i.address < loop.end and i.target is not None
               and i.address < i.target <= loop.end]
    tail = max((i.target for i in forward), default=None)
    return [i for i in forward if i.target == tail]


#: m·n·k of the warp-level MMA shapes as the SASS spells them (``HMMA.1688`` is m16n8k8)
WARP_MMA_SHAPES = {"1688": 16 * 8 * 8, "16816": 16 * 8 * 16, "16832": 16 * 8 * 32, "884": 8 * 8 * 4, "848": 8 * 4 * 8}


def mma_macs(full: str) -> int:
    """Multiply-accumulates of one MMA instruction per issuing warp: ``HMMA.1688.F32.TF32`` is
    m16n8k8 for one warp; ``HGMMA.64x64x8.F32.TF32`` is m64n64k8 for a warpgroup, whose four
    warps each issue it (a quarter each)."""
    m = re.search(r"GMMA\.(\d+)x(\d+)x(\d+)", full)
    if m:
        return int(m.group(1)) * int(m.group(2)) * int(m.group(3)) // 4
    m = re.search(r"MMA\.(\d+)", full)
    if m and m.group(1) in WARP_MMA_SHAPES:
        return WARP_MMA_SHAPES[m.group(1)]
    raise ValueError(f"unknown MMA shape {full!r}")
