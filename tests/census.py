"""The operation census: every aten operation the package runs, checked against the CUDA
kernels PyTorch declares, and the host synchronisations of every tile counted.

CI has no CUDA machine (the GPU check runs only now and then), so the CUDA path is checked by
construction. A `TorchDispatchMode` sees each aten operation below autograd (composite-implicit operations
already decomposed into the ones that run) with its tensors' dtypes and layouts, while the
workloads of `run_workloads` drive every kernel and every pass on the CPU. Each (operation,
layouts, dtypes) seen must be on the committed list `census_ops.txt`, where it names the
`native_functions.yaml` dispatch entry that serves it on CUDA (`cuda_entry`).

What the yaml can tell: whether CUDA (or SparseCUDA, SparseCsrCUDA for sparse operands) has a
kernel for the operation, or a composite one made of other operations. What it cannot: which
dtypes that kernel takes; those are in the kernel's `AT_DISPATCH_*` macro in the .cu source, not
in the yaml. The list records every dtype combination used so that a new one fails the census
and is looked at; `RISKY_DTYPES` names the combinations known to be missing on CUDA, which fail
whatever the list says. Nor can it tell which layout each operand has (a CSR times a dense
matrix from a CSR times a CSR): the one CPU-only product of that kind, `core.sparse`'s CSR @
CSR straight into a dense matrix (CUDA's `addmm` has none), is switched to the device's path
while the workloads run (`device_paths`), so the census sees what CUDA would run; so are
typicality's counts by a hash index on the host (a GPU searches its tables).

Regenerate the list (after a kernel changes), from the project root:
    python tests/census.py --write
It prints the host syncs per tile of each kernel too; the budgets in `census_budget.json` are
edited by hand (a budget that regenerates itself would check nothing).
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

TESTS = Path(__file__).resolve().parent
OPS_FILE = TESTS / "census_ops.txt"
BUDGET_FILE = TESTS / "census_budget.json"
LAYOUTS = {torch.strided: "strided", torch.sparse_coo: "sparse_coo", torch.sparse_csr: "sparse_csr",
           torch.sparse_csc: "sparse_csc"}
# The dispatch key a CUDA tensor of each layout reaches; operands of several layouts dispatch
# on the most specific one (CSR above COO above dense), as PyTorch's key order does.
CUDA_KEYS = {"strided": "CUDA", "sparse_coo": "SparseCUDA", "sparse_csr": "SparseCsrCUDA",
             "sparse_csc": "SparseCsrCUDA"}
LAYOUT_ORDER = ("sparse_csr", "sparse_csc", "sparse_coo", "strided")
COMPOSITE_KEYS = ("CompositeExplicitAutograd", "CompositeExplicitAutogradNonFunctional",
                  "CompositeImplicitAutograd")

# Operations that make the host wait for a CUDA device, and why:
# - torch's own tags: `data_dependent_output` (the result is read on the host: item, int(t),
#   float(t), bool(t) all reach _local_scalar_dense) and `dynamic_output_shape` (the output's
#   size comes from device data: nonzero, unique*, masked_select, bincount, repeat_interleave
#   without output_size, one_hot without num_classes, and index with a boolean mask, which
#   runs nonzero inside);
# - untagged ones that return a host value computed from device data: equal, is_nonzero;
# - sparse: coalesce (the unique indices' count sizes the result) and sparse x sparse
#   products (cuSPARSE's SpGEMM sizes its output on the host);
# - Tensor.tolist and Tensor.numpy, which copy to the host (on a CPU tensor they dispatch
#   nothing, so the census counts the Python calls), and lift_fresh, torch.tensor(python data),
#   which on a device is a host-to-device copy_ that PyTorch ends with a stream synchronize
#   unless non_blocking.
# - blocking copies to the device: Tensor.to with a device (or another tensor) and
#   Tensor.cuda, without non_blocking=True (torch.as_tensor and torch.tensor of host data are
#   lift_fresh, above). From host memory
#   these are a cudaMemcpy that waits for the stream; on a CPU tensor they dispatch nothing, so
#   the census counts the Python calls, each as if its source were on the host.
# On the CPU every tensor is counted as if it were on the device, so kernels that keep a
# table on the host on purpose are over-counted (and a move of a tensor already on the device
# counts as a copy): the counts are upper bounds.
# Not counted: _assert_async (asynchronous on CUDA by design), nonzero_static, and
# repeat_interleave with output_size.
UNTAGGED_SYNCS = {"aten::equal", "aten::is_nonzero", "aten::_coalesce", "aten::coalesce", "aten::lift_fresh"}
SPARSE_PRODUCTS = {"aten::mm", "aten::addmm", "aten::_sparse_sparse_matmul", "aten::bmm"}
BOOLEAN_INDEXED = {"aten::index", "aten::index_put", "aten::index_put_", "aten::_index_put_impl_"}
# (operation, layout, dtype) that CUDA is known not to take: sparse products of integer values
# (SparseMatMul.cu dispatches AT_DISPATCH_FLOATING_AND_COMPLEX_TYPES_AND2(Half, BFloat16); the
# CSR products go to cuSPARSE, whose value types are floating and complex).
RISKY_DTYPES = {("aten::mm", "sparse_csr", "int64"), ("aten::addmm", "sparse_csr", "int64"),
                ("aten::mm", "sparse_csr", "int32"), ("aten::addmm", "sparse_csr", "int32"),
                ("aten::_sparse_sparse_matmul", "sparse_coo", "int64")}


# Operations that raise on CUDA under torch.use_deterministic_algorithms(True) (its docstring's
# list, for what this package could call), by aten name and the operand dtypes that trigger it;
# the CPU runs them quietly, so the suite alone under that mode cannot find them.
FLOATING = {"float16", "bfloat16", "float32", "float64"}
NONDETERMINISTIC_ON_CUDA = {
    "aten::cumsum": FLOATING,  # "when dtype is floating point or complex"
    "aten::bincount": FLOATING,  # with float weights
    "aten::histc": FLOATING | {"int64", "int32"},
    "aten::put_": FLOATING | {"int64", "int32"},  # with accumulate=True (not told apart here)
    "aten::median": FLOATING | {"int64", "int32"},  # with indices
    "aten::nll_loss_forward": FLOATING,
}
# Known, with who removes them; the census test fails when one is gone, so the entry goes too.
KNOWN_NONDETERMINISTIC: dict[str, str] = {}


@dataclass(frozen=True, order=True)
class OpUse:
    """One aten overload with the layouts and dtypes of its tensor operands (and results)."""

    op: str
    layouts: str
    dtypes: str

    def line(self) -> str:
        return f"{self.op} {self.layouts} {self.dtypes} {cuda_entry(self.op, self.layouts)}"


def _describe(tensors: list[torch.Tensor]) -> tuple[str, str]:
    layouts = sorted({LAYOUTS.get(t.layout, str(t.layout)) for t in tensors}, key=LAYOUT_ORDER.index)
    dtypes = sorted({str(t.dtype).removeprefix("torch.") for t in tensors})
    return ",".join(layouts) or "-", ",".join(dtypes) or "-"


def is_sync(func: Any, args: tuple, kwargs: dict) -> bool:
    """Whether this operation would make the host wait for a CUDA device (see above)."""
    name = func._schema.name
    tags = set(func.tags)
    if name in BOOLEAN_INDEXED:
        indices = args[1] if len(args) > 1 else []
        return any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in indices)
    if name == "aten::repeat_interleave":
        return kwargs.get("output_size") is None
    if name == "aten::one_hot":
        return (args[1] if len(args) > 1 else kwargs.get("num_classes", -1)) == -1
    if name in SPARSE_PRODUCTS:
        return sum(isinstance(a, torch.Tensor) and a.layout != torch.strided for a in args) > 1
    return (torch.Tag.data_dependent_output in tags or torch.Tag.dynamic_output_shape in tags
            or name in UNTAGGED_SYNCS)


def blocking_move(name: str, args: tuple, kwargs: dict, tensor: torch.Tensor | None = None) -> bool:
    """Whether Tensor.to or Tensor.cuda with these arguments copies to a device and waits: a
    device (or a tensor, whose device it takes) is named, and non_blocking is not set; a move of
    `tensor` to the device it is on already copies nothing (transformers' rotary embedding
    moves its frequencies to the activations' device at every call)."""
    if kwargs.get("non_blocking") or any(isinstance(a, bool) and a for a in args):
        return False
    if name == "cuda":
        return True
    targets = [*args, kwargs.get("device"), kwargs.get("other")]
    devices = [a.device if isinstance(a, torch.Tensor) else torch.device(a) for a in targets
               if isinstance(a, (str, torch.device, torch.Tensor))]
    return any(tensor is None or device != tensor.device for device in devices)


@dataclass
class Census(TorchDispatchMode):
    """Records every aten operation, and the host syncs of each `scope` it is told of."""

    uses: set[OpUse] = field(default_factory=set)
    syncs: Counter[str] = field(default_factory=Counter)
    sync_ops: Counter[str] = field(default_factory=Counter)
    scope: str | None = None
    same_device_moves: bool = True  # False: moves to the tensor's own device are not counted

    def __post_init__(self) -> None:
        super().__init__()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        result = func(*args, **kwargs)
        tensors = [t for t in tree_leaves((args, kwargs, result)) if isinstance(t, torch.Tensor)]
        layouts, dtypes = _describe(tensors)
        self.uses.add(OpUse(f"{func._schema.name}.{func._overloadname}", layouts, dtypes))
        if is_sync(func, args, kwargs):
            self.host_read(func._schema.name)
        return result

    def host_read(self, what: str) -> None:
        if self.scope is not None:
            self.syncs[self.scope] += 1
            self.sync_ops[f"{self.scope}: {what}"] += 1

    @contextmanager
    def host_copies(self) -> Iterator[None]:
        """Counts Tensor.tolist and Tensor.numpy, and the blocking copies to a device (Tensor.to,
        Tensor.cuda), which dispatch nothing on a CPU tensor."""
        methods = {name: getattr(torch.Tensor, name) for name in ("tolist", "numpy", "to", "cuda")}

        def counted(name: str) -> Callable[..., Any]:
            def method(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
                mover = None if self.same_device_moves else tensor
                if name in ("tolist", "numpy") or blocking_move(name, args, kwargs, mover):
                    self.host_read(f"Tensor.{name}")
                return methods[name](tensor, *args, **kwargs)
            return method

        for name in methods:
            setattr(torch.Tensor, name, counted(name))
        try:
            yield
        finally:
            for name, original in methods.items():
                setattr(torch.Tensor, name, original)



# -- the CUDA side: native_functions.yaml --------------------------------------------------


@cache
def native_functions() -> dict[str, dict[str, Any]]:
    """Each overload of native_functions.yaml (shipped in the torch wheel) by `name.overload`."""
    import torchgen
    import yaml

    path = Path(torchgen.__file__).parent / "packaged" / "ATen" / "native" / "native_functions.yaml"
    entries = yaml.load(path.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    table = {}
    for entry in entries:
        signature = entry["func"].split("(", 1)[0]
        table[signature if "." in signature else f"{signature}.default"] = entry
    return table


def cuda_entry(op: str, layouts: str) -> str:
    """The dispatch entry that serves `op` on CUDA tensors of these layouts, as written in
    native_functions.yaml ("CUDA", "SparseCsrCUDA", "CompositeExplicitAutograd", ...; through
    a structured delegate: "CUDA via add.out"), or "MISSING". CompositeExplicitAutograd
    kernels are registered for every backend, sparse ones included; the census does not see
    the operations they call (mostly views and factories over empty, fill_ and as_strided)."""
    layout = next(kind for kind in LAYOUT_ORDER if kind in layouts.split(",") or kind == "strided")
    key = CUDA_KEYS[layout]
    name = op.removeprefix("aten::")
    via = ""
    for _ in range(3):
        entry = native_functions().get(name)
        if entry is None:
            return "MISSING"
        dispatch = {part.strip(): kernel for keys, kernel in (entry.get("dispatch") or {}).items()
                    for part in keys.split(",")}
        for candidate in (key, *COMPOSITE_KEYS):
            if candidate in dispatch:
                return candidate + via
        if layout == "strided" and "ufunc_inner_loop" in entry:
            return "CUDA (ufunc codegen)" + via  # torchgen writes the CPU and CUDA kernels
        if not dispatch and "structured_delegate" not in entry:
            return "CompositeImplicitAutograd" + via  # no dispatch section: implicit
        if "structured_delegate" not in entry or layout != "strided":
            return "MISSING"
        name = entry["structured_delegate"]
        via = f" via {name}"
    return "MISSING"


def risky(use: OpUse) -> bool:
    return any((use.op, layout, dtype) in RISKY_DTYPES
               for layout in use.layouts.split(",") for dtype in use.dtypes.split(","))


def nondeterministic_on_cuda(use: OpUse) -> bool:
    triggers = NONDETERMINISTIC_ON_CUDA.get(use.op.split(".")[0], set())
    return bool(triggers & set(use.dtypes.split(",")))


def read_allowed() -> dict[OpUse, str]:
    allowed = {}
    for number, line in enumerate(OPS_FILE.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip() and not line.startswith("#"):
            parts = line.split(" ", 3)
            if len(parts) != 4:
                raise ValueError(f"{OPS_FILE}:{number}: want 'op layouts dtypes cuda-entry', got {line!r}")
            allowed[OpUse(*parts[:3])] = parts[3]
    return allowed


def write_allowed(uses: set[OpUse]) -> None:
    header = ("# aten overload, operand layouts, operand dtypes, the native_functions.yaml entry that serves it\n"
              "# on CUDA. Made by `python tests/census.py --write`; checked by tests/core/test_census.py.\n")
    OPS_FILE.write_text(header + "".join(use.line() + "\n" for use in sorted(uses)), encoding="utf-8")


# -- the workloads ---------------------------------------------------------------------------


@contextmanager
def tiles_counted(census: Census, counts: dict[str, list[int]]) -> Iterator[None]:
    """Each kernel's `tile` runs in the scope of that kernel's name; `counts[name]` gets the
    host syncs of each tile."""
    from gpu_neighbors.kernels import KERNEL_NAMES, kernel_class

    originals = {kind: kind.tile for kind in map(kernel_class, KERNEL_NAMES)}

    def scoped(kind: type, original: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
        def tile(self: Any, encoded: Any, start: int, stop: int) -> torch.Tensor:
            outer, census.scope = census.scope, kind.name
            before = census.syncs[kind.name]
            try:
                return original(self, encoded, start, stop)
            finally:
                census.scope = outer
                counts.setdefault(kind.name, []).append(census.syncs[kind.name] - before)
        return tile

    for kind, original in originals.items():
        kind.tile = scoped(kind, original)  # type: ignore[method-assign]
    try:
        yield
    finally:
        for kind, original in originals.items():
            kind.tile = original  # type: ignore[method-assign]


@contextmanager
def device_paths() -> Iterator[None]:
    """The package's CPU-only operations switched to the ones a CUDA device runs instead: the
    compiled loops that run only on CPU tensors (the top k of a tile, n-gram features, BLEU's
    shared counts, BLEU*'s by-length values and order factors, typicality's rows) off, as on a
    device, where torch's operations run."""
    from gpu_neighbors.core import sparse, topk
    from gpu_neighbors.kernels import bleu, bleu_sets
    from gpu_neighbors.text import ngrams, typicality

    on_cpu_tensors = (topk, ngrams, bleu, bleu_sets, typicality)
    natives = [module.native for module in on_cpu_tensors]
    kept = (sparse.SPARSE_INTO_DENSE, sparse.ENTRY_BY_ENTRY, sparse.BY_SCIPY_ON_HOST, typicality.HASHED_ON,
            bleu.SLICED_ON)
    sparse.SPARSE_INTO_DENSE = sparse.BY_SCIPY_ON_HOST = typicality.HASHED_ON = bleu.SLICED_ON = frozenset()
    sparse.ENTRY_BY_ENTRY = frozenset({"cpu"})
    for module in on_cpu_tensors:
        module.native = None
    try:
        yield
    finally:
        (sparse.SPARSE_INTO_DENSE, sparse.ENTRY_BY_ENTRY, sparse.BY_SCIPY_ON_HOST, typicality.HASHED_ON,
         bleu.SLICED_ON) = kept
        for module, native in zip(on_cpu_tensors, natives):
            module.native = native


def huse(count: int) -> tuple[list[str], list[float]]:
    from conftest import SHARED_DATA

    records = [json.loads(line) for line in SHARED_DATA.read_text(encoding="utf-8").splitlines()[:count]]
    return [record["text"] for record in records], [record["score"] for record in records]


def census_settings() -> list[dict[str, Any]]:
    """Every kernel under every estimator, fixed (the paper's thresholds) and tuned (the
    threshold rule, top-k, ridge's penalty); BLEU's other weights and smoothings; BERTScore
    rescaled (its baseline estimated) and in bfloat16 and float16 with idf."""
    from gpu_neighbors.estimators import Ridge, Threshold, TopK
    from gpu_neighbors.kernels.parts import BertScore, Bleu
    from minilm import MODEL_PATH

    bertscore = {"model": MODEL_PATH, "layer": 2, "rescale": False}
    kernels: list[dict[str, Any]] = [{"kernel": name} for name in ("bleu", "rouge", "meteor", "tfidf")]
    kernels.append({"kernel": BertScore(**bertscore)})
    estimators = [{"estimator": Threshold.paper()}, {"estimator": Threshold(tuning="always")},
                  {"estimator": TopK(tuning="always")}, {"estimator": Ridge(tuning="always")}]
    return [{**kernel, **estimator} for kernel in kernels for estimator in estimators] + [
        {"kernel": Bleu(weights=(0.25, 0.25, 0.25, 0.25), smoothing="exp")},
        {"kernel": Bleu(smoothing="none"), "estimator": TopK(k=5, tuning="never")},
        {"kernel": BertScore(**{**bertscore, "rescale": True})},
        *({"kernel": BertScore(**{**bertscore, "idf": True, "precision": precision})}
          for precision in ("bfloat16", "float16")),
    ]


def run_workloads(census: Census) -> dict[str, list[int]]:
    """Every kernel fitted (tuned or not, under every estimator), encoding and tiling (predict
    with its intervals, on the host and on the device, with neighbours, and leave-one-out; small
    tiles so each pass has several; long texts among short ones, so ROUGE-L's bit vectors span
    several words), token ids, rewards, Self-BLEU, aligned BLEU, MBR and pairs; returns the
    host syncs of each tile, by kernel."""
    import tempfile

    from conftest import ADVERSARIAL_TEXTS
    from gpu_neighbors import NeighborsScorer
    from gpu_neighbors.estimators import Threshold, TopK
    from gpu_neighbors.kernels.parts import BertScore, Bleu
    from gpu_neighbors.allpairs.mbr import mbr
    from gpu_neighbors.allpairs.pairs import pairs
    from gpu_neighbors.allpairs.self_bleu import self_bleu
    from gpu_neighbors.kernels.aligned_bleu import corpus_bleu, sentence_bleu
    from gpu_neighbors.text.tokenizers import HuggingFaceTokenizer
    from minilm import MODEL_PATH

    texts, scores = huse(90)
    long_texts = [" ".join(texts[:4]), ADVERSARIAL_TEXTS[11]]  # 200-400 tokens: multiword bit vectors
    train, quality = texts[:60] + long_texts, scores[:60] + [0.5, 0.2]
    candidates = texts[60:] + ADVERSARIAL_TEXTS[:6] + ADVERSARIAL_TEXTS[11:13] + [" ".join(texts[4:8])]
    small = {"chunk_size": 8, "memory_budget": 400_000, "estimator": Threshold.paper(), "device": "cpu"}
    tiles: dict[str, list[int]] = {}
    with census, census.host_copies(), tiles_counted(census, tiles), device_paths():
        for options in census_settings():
            scorer = NeighborsScorer(**{**small, **options}).fit(train, quality)
            scorer.predict(candidates, return_neighbors=3)
            scorer.intervals(scorer.predict_tensors(candidates))
            scorer.leave_one_out()
        tokenizer = HuggingFaceTokenizer(MODEL_PATH)
        by_ids = NeighborsScorer(kernel=Bleu(tokenizer=tokenizer), **small).fit(train, quality)
        batch = tokenizer.hf(candidates, padding=True, return_tensors="pt")
        by_ids.predict_ids(batch["input_ids"], batch["attention_mask"])
        by_ids.predict_ids(batch["input_ids"], batch["attention_mask"])  # after the tables are built
        by_ids.reward(batch["input_ids"], attention_mask=batch["attention_mask"], subsample=0.5)
        by_ids.reward(candidates)
        self_bleu(texts[:40], device="cpu")
        sentence_bleu(candidates, [[text, texts[0]] for text in texts[:len(candidates)]], smoothing="add1")
        corpus_bleu(candidates, texts[:len(candidates)])
        references = tokenizer.hf(texts[:len(candidates)], padding=True, return_tensors="pt")
        for smoothing in ("none", "epsilon", "add1", "exp"):  # aligned BLEU on token ids
            sentence_bleu(batch["input_ids"], references["input_ids"][:, None, :].expand(-1, 2, -1),
                          attention_mask=batch["attention_mask"],
                          reference_mask=references["attention_mask"][:, None, :].expand(-1, 2, -1),
                          reference_counts=torch.ones(len(candidates), dtype=torch.int64), smoothing=smoothing)
        sentence_bleu(batch["input_ids"], references["input_ids"], vocab_size=tokenizer.hf.vocab_size)
        mbr(texts[:30], [index % 3 for index in range(30)], device="cpu", memory_budget=200_000)
        with tempfile.TemporaryDirectory() as folder:
            pairs(texts[:20], texts[20:50], output=Path(folder) / "pairs.npy", device="cpu")
            if importlib.util.find_spec("pyarrow"):  # the parquet extra: the top-k pass
                pairs(texts[:20], output=Path(folder) / "pairs.parquet", top_k=3, device="cpu")
    return tiles


@cache
def census_run() -> tuple[Census, dict[str, list[int]]]:
    census = Census()
    tiles = run_workloads(census)
    return census, tiles


def most_per_tile(tiles: dict[str, list[int]]) -> dict[str, int]:
    return {kernel: max(counts) for kernel, counts in sorted(tiles.items())}


def main() -> int:
    parser = argparse.ArgumentParser(description="The operation census (see tests/census.py).")
    parser.add_argument("--write", action="store_true", help=f"rewrite {OPS_FILE.name} from this run")
    args = parser.parse_args()
    census, tiles = census_run()
    allowed = read_allowed() if OPS_FILE.exists() else {}
    new = sorted(census.uses - set(allowed))
    for use in new:
        print(f"not on the list: {use.line()}")
    for use in sorted(census.uses):
        if "MISSING" in use.line() or risky(use):
            print(f"NO CUDA KERNEL: {use.line()}")
    print("most host syncs in one tile:", json.dumps(most_per_tile(tiles)),
          f"(budgets in {BUDGET_FILE.name}: raise one only with a reason)")
    print("tiles:", {kernel: len(counts) for kernel, counts in tiles.items()},
          "syncs by operation:", dict(census.sync_ops))
    if args.write:
        write_allowed(census.uses)
        print(f"wrote {len(census.uses)} entries to {OPS_FILE}")
    return 0


if __name__ == "__main__":
    sys.path[:0] = [str(TESTS), str(TESTS.parent)]
    sys.exit(main())
