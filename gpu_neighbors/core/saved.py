"""A saved scorer's folder: what it holds, how it is written, and how it is read back safely.

    scorer.json          format and package version, signature, every part's settings, the fitted
                         settings, and for each file beside it its size and SHA-256 (and for each
                         tensor its dtype and shape)
    tensors.safetensors  every fitted tensor (safetensors: a JSON header and raw little-endian
                         bytes; nothing in it can run)
    training.jsonl       the training texts and their scores, one {"text", "score"} a line, with
                         any fields kept beside them: a saved scorer contains its training set,
                         so sharing one shares the data (the tensors hold the texts and scores too)

Writing: each file goes to NAME.partial (created exclusively, never through a link), is fsynced
and renamed into place, scorer.json last, so a folder with a scorer.json at its name is a
complete one (with `data/output.py`'s steps, `core/files.py`). A scorer that is replaced stays
whole until its successor is: the new one is written complete into the sibling folder
FOLDER.partial, and the two folders are swapped in one step (renameat2's exchange; where a
system lacks it, two renames, between which a kill leaves the old scorer at FOLDER.replaced).
A full disk, an error or a kill at any point leaves the old scorer loadable; whatever a save
leaves beside the folder holds only a scorer's files, and the next save removes it.

Reading never unpickles and never runs code from the folder: JSON, safetensors and JSON lines
only, and every file is checked against scorer.json (size, digest, then dtypes and shapes)
before it is used. Only regular files are read, never through a link (a link could
read another file, /dev/zero without end; a FIFO would never answer), and each file's size on
disk is compared with the recorded one before a byte of it is read. Each refusal is one line
naming the file.
"""
from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
from collections.abc import Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gpu_neighbors.core.files import CLOEXEC, NOFOLLOW, create_new, exchange, fsync_directory, naming

FORMAT = "gpu-neighbors scorer"
# 2: the training texts and scores are in the tensors (1 kept them in training.jsonl alone);
# 3: the typicality tables count the training texts' characters; 4: the degeneracy score; 5: the
# outlier test has the spelling statistic (five typicality columns, five degeneracy weights); 6:
# the fluency part (its model's name and SHA-256, the stacked estimate, the outlier test's column);
# 7: fluency's second statistic, SLOR (its unigram table, a second column of the stacked estimate
# and of the outlier test); 8: the outlier test ranks its union among the calibration texts' own
# (each text's smallest p-value beside its product); a folder of another version is refused in one line
FORMAT_VERSION = 8
CONFIG, TENSORS, TRAINING = "scorer.json", "tensors.safetensors", "training.jsonl"
# Everything a saved scorer's folder may hold: its files, and their partial files while written.
OWN_FILES = frozenset(name + suffix for name in (CONFIG, TENSORS, TRAINING) for suffix in ("", ".partial"))
MAX_CONFIG_BYTES = 16 << 20  # scorer.json: settings and figures, a few kilobytes; nothing records its size
# Why a folder that is a mount point (or a bind mount) cannot hold a scorer that is replaced.
MOUNTED = ("a saved scorer is replaced by swapping its folder with the new one written beside it, which a mount "
           "point cannot be: save into a folder inside it")
# The training texts and scores also ride in the tensors (packed UTF-8, float64): the copy `read`
# uses, since decoding them costs a seventh of parsing training.jsonl, which is there for people
# to read and is parsed only for the fields kept beside the texts.
TEXTS, TEXT_ENDS, SCORES = "training.texts", "training.text_ends", "training.scores"


class SavedScorerError(ValueError):
    """A folder that cannot be loaded as a saved scorer; the message names the file."""


@dataclass(frozen=True)
class SavedScorer:
    """What a folder holds: the settings (JSON), the fitted tensors, the training set."""

    config: dict[str, Any]
    tensors: dict[str, torch.Tensor]
    texts: list[str]
    scores: list[float]
    # Labels kept beside each training text (a field name -> one JSON value a text), written into
    # its training.jsonl record: what `systems`' self-check reads (each text's system).
    fields: dict[str, list[Any]] = field(default_factory=dict)


def pack_strings(strings: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """`strings` as tensors (safetensors holds nothing else): their UTF-8 bytes concatenated
    (uint8) and where each ends (int64)."""
    encoded = [string.encode("utf-8", "surrogatepass") for string in strings]
    ends = torch.tensor([len(data) for data in encoded], dtype=torch.int64).cumsum(0)
    return torch.from_numpy(np.frombuffer(b"".join(encoded), dtype=np.uint8).copy()), ends


def unpack_strings(data: torch.Tensor, ends: torch.Tensor) -> list[str]:
    """The strings `pack_strings` packed; ValueError where the tensors cannot be its output."""
    if data.dtype != torch.uint8 or ends.dtype != torch.int64 or data.dim() != 1 or ends.dim() != 1:
        raise ValueError("packed strings must be uint8 bytes and int64 ends")
    bounds = [0, *ends.tolist()]
    if any(later < earlier for earlier, later in zip(bounds, bounds[1:])) or bounds[-1] != data.numel():
        raise ValueError("packed strings' ends are not increasing up to the bytes' length")
    raw = data.numpy().tobytes()
    try:
        return [raw[start:stop].decode("utf-8", "surrogatepass") for start, stop in zip(bounds, bounds[1:])]
    except UnicodeDecodeError:
        raise ValueError("packed strings are not UTF-8") from None


def check_folder(folder: str | os.PathLike[str], overwrite: bool = False,
                 replace: str = "give overwrite=True") -> None:
    """What `write` refuses, for a caller to check before a long fit: a file in place of the
    folder, a saved scorer there unless `overwrite` (`replace` says how to ask for it), a folder
    holding anything else, and beside a scorer to replace, a FOLDER.partial or FOLDER.replaced
    that holds anything but a scorer's files (a save's leftovers, which it removes)."""
    folder = Path(folder)
    if not folder.is_dir():
        if folder.exists():
            raise FileExistsError(f"{folder}: is a file, not a folder to save a scorer in")
        return
    if os.path.lexists(folder / CONFIG) and not overwrite:
        raise FileExistsError(f"{folder / CONFIG}: a saved scorer is already there; {replace} to replace it")
    strangers = sorted(path.name for path in folder.iterdir() if path.name not in OWN_FILES)
    if strangers:
        raise FileExistsError(f"{folder}: holds {', '.join(strangers[:3])}, not a saved scorer: choose an empty folder")
    if os.path.lexists(folder / CONFIG):
        if os.path.ismount(os.path.realpath(folder)):
            raise FileExistsError(f"{folder}: a mount point, and {MOUNTED}")
        for suffix in (".partial", ".replaced"):
            _leftover_files(_sibling(folder, suffix))


def write(folder: str | os.PathLike[str], saved: SavedScorer, overwrite: bool = False) -> Path:
    """Write `saved` to `folder` (made if missing); a folder that already holds a scorer is
    replaced only with `overwrite`, and one that holds anything else never. All or nothing: a
    scorer replaced stays whole and loadable until the new one is complete (module docstring);
    an OS error names its file."""
    from safetensors.torch import save

    folder = Path(folder)
    check_folder(folder, overwrite)
    reserved = sorted(set(saved.fields) & {"text", "score"})
    if reserved or any(len(values) != len(saved.texts) for values in saved.fields.values()):
        raise ValueError(f"fields must be one value per training text, named other than text and score "
                         f"({', '.join(reserved) or 'a field has another length'})")
    if {TEXTS, TEXT_ENDS, SCORES} & set(saved.tensors):
        raise ValueError(f"the tensors {TEXTS}, {TEXT_ENDS} and {SCORES} are the training set's, written here")
    texts, text_ends = pack_strings(saved.texts)
    tensors = {**{name: tensor.detach().cpu().contiguous() for name, tensor in saved.tensors.items()},
               TEXTS: texts, TEXT_ENDS: text_ends, SCORES: torch.tensor(saved.scores, dtype=torch.float64)}
    records = ({"text": text, "score": score, **{name: values[index] for name, values in saved.fields.items()}}
               for index, (text, score) in enumerate(zip(saved.texts, saved.scores)))
    payloads = {
        TENSORS: save(tensors),
        # A lone surrogate (text decoded with surrogateescape) has no UTF-8: written as JSON's \ud800 escape
        TRAINING: "".join(_json_line(record, index, saved.fields) for index, record in enumerate(records)).encode(
            "utf-8", "backslashreplace"),
    }
    files = {name: {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()} for name, data in payloads.items()}
    shapes = {name: {"dtype": str(tensor.dtype).removeprefix("torch."), "shape": list(tensor.shape)}
              for name, tensor in tensors.items()}
    config = {"format": FORMAT, "format_version": FORMAT_VERSION, **saved.config, "files": files,
              "tensors": shapes,
              "training": {"count": len(saved.texts), "fields": list(saved.fields)}}
    payloads[CONFIG] = (json.dumps(config, indent=1, ensure_ascii=False) + "\n").encode("utf-8")
    if not os.path.lexists(folder / CONFIG):  # nothing to keep whole: written in place, scorer.json last
        folder.mkdir(parents=True, exist_ok=True)  # only now: a save refused above leaves no folder behind
        _write_files(folder, payloads)
        return folder
    _replace(Path(os.path.realpath(folder)), payloads)
    return folder


def _write_files(folder: Path, payloads: Mapping[str, bytes]) -> None:
    for name in (TENSORS, TRAINING, CONFIG):  # scorer.json last: its presence means complete
        _write_atomically(folder / name, payloads[name])


def _replace(folder: Path, payloads: Mapping[str, bytes]) -> None:
    """The scorer in `folder` replaced by `payloads`' as one step: written complete into the
    sibling FOLDER.partial, then swapped in (`exchange`), the old one removed after."""
    staging, aside = _sibling(folder, ".partial"), _sibling(folder, ".replaced")
    for leftover in (staging, aside):  # of a save killed before it finished: only a scorer's files
        _remove(leftover, _leftover_files(leftover))
    staging.mkdir()
    replaced = staging  # where the old scorer is once the new one is in place
    try:
        staging.chmod(stat.S_IMODE(os.stat(folder).st_mode))  # who may read it, as before
        _write_files(staging, payloads)
        fsync_directory(staging)
        replaced = _swap(staging, folder, aside)
        fsync_directory(folder.parent)
    finally:  # the unfinished new scorer, or the old one once replaced; a failure here loses nothing
        for leftover in {staging, replaced}:
            with suppress(OSError):
                _remove(leftover, _leftover_files(leftover))


def _swap(staging: Path, folder: Path, aside: Path) -> Path:
    """The complete new scorer at `staging` put in `folder`'s place; returns where the old one
    is then. In one step where the system can (`exchange`), else by two renames, between which
    the old scorer is at `aside`."""
    try:
        if exchange(staging, folder):
            return staging
        os.rename(folder, aside)
    except OSError as error:
        if error.errno in (errno.EBUSY, errno.EXDEV):
            raise OSError(error.errno, f"{error.strerror}: {MOUNTED}", str(folder)) from None
        raise
    try:
        os.rename(staging, folder)
    except BaseException:
        os.rename(aside, folder)
        raise
    return aside


def _sibling(folder: Path, suffix: str) -> Path:
    """FOLDER + suffix beside the folder itself (a link to one: beside its target)."""
    real = Path(os.path.realpath(folder))
    return real.with_name(real.name + suffix)


def _leftover_files(folder: Path) -> list[str]:
    """The names in `folder`, a save's leftover beside the scorer it wrote (nothing if it is
    missing); refused where it is not a folder holding a scorer's files alone."""
    if not os.path.lexists(folder):
        return []
    if folder.is_symlink() or not folder.is_dir():
        raise FileExistsError(f"{folder}: is not the folder a save of the scorer beside it leaves: move it away")
    names = sorted(os.listdir(folder))
    strangers = [name for name in names if name not in OWN_FILES]
    if strangers:
        raise FileExistsError(f"{folder}: holds {', '.join(strangers[:3])}, not what a save of the scorer beside it "
                              "leaves: move it away")
    return names


def _remove(folder: Path, names: list[str]) -> None:
    if not os.path.lexists(folder):
        return
    for name in names:
        (folder / name).unlink()
    folder.rmdir()


def _json_line(record: dict[str, Any], index: int, fields: dict[str, list[Any]]) -> str:
    """`record` (training text `index`) as a JSON line; a field value JSON cannot hold is named."""
    try:
        return json.dumps(record, ensure_ascii=False) + "\n"
    except (TypeError, ValueError):
        for name, values in fields.items():
            try:
                json.dumps(values[index])
            except (TypeError, ValueError):
                raise TypeError(f"fields[{name!r}][{index}]: {values[index]!r:.60} ({type(values[index]).__name__}) "
                                "is not a JSON value") from None
        raise


def _write_atomically(path: Path, data: bytes) -> None:
    partial = path.with_name(path.name + ".partial")
    with naming(partial), create_new(partial) as handle:  # a full disk's error names the file
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(partial, path)
    fsync_directory(path.parent)


def read(folder: str | os.PathLike[str]) -> SavedScorer:
    """The folder's scorer, every file checked against scorer.json before it is used."""
    from safetensors import SafetensorError
    from safetensors.torch import load

    folder = Path(folder)
    config_path = folder / CONFIG
    if not folder.is_dir() or not (config_path.exists() or config_path.is_symlink()):
        replaced = _sibling(folder, ".replaced")
        where = (f"; a save that replaced it was stopped between its two renames: the earlier scorer is in "
                 f"{replaced}" if (replaced / CONFIG).is_file() else "")
        raise SavedScorerError(f"{folder}: not a saved scorer (no {CONFIG} in it){where}")
    try:
        config = json.loads(_regular_file(config_path, None))
    except (ValueError, UnicodeDecodeError) as error:
        raise SavedScorerError(f"{config_path}: not a saved scorer's settings (not JSON: {error})") from None
    except RecursionError:
        raise SavedScorerError(f"{config_path}: not a saved scorer's settings (nested too deeply)") from None
    if not isinstance(config, dict) or config.get("format") != FORMAT:
        raise SavedScorerError(f"{config_path}: not a saved scorer's settings (no \"format\": \"{FORMAT}\")")
    version = config.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise SavedScorerError(f"{config_path}: format_version must be a positive integer, not {version!r}")
    if version > FORMAT_VERSION:
        raise SavedScorerError(f"{config_path}: format version {version} is newer than this gpu-neighbors reads "
                               f"({FORMAT_VERSION}); upgrade gpu-neighbors to load it")
    if version < FORMAT_VERSION:
        raise SavedScorerError(f"{config_path}: format version {version} is older than this gpu-neighbors reads "
                               f"({FORMAT_VERSION}); fit the scorer again")
    data = {name: _checked_bytes(folder, name, config) for name in (TENSORS, TRAINING)}
    try:
        tensors = load(data[TENSORS])
    except (SafetensorError, ValueError, RuntimeError) as error:
        raise SavedScorerError(f"{folder / TENSORS}: not a safetensors file ({error})") from None
    _check_tensors(folder / TENSORS, tensors, config.get("tensors"))
    texts, scores = _training_set(folder / TENSORS, tensors, config)
    fields = _fields(folder / TRAINING, data[TRAINING], config, texts, scores)
    return SavedScorer(config, tensors, texts, scores, fields)


def _checked_bytes(folder: Path, name: str, config: Mapping[str, Any]) -> bytes:
    path = folder / name
    expected = _section(folder / CONFIG, config, "files").get(name)
    size = expected.get("size") if isinstance(expected, dict) else None
    if not isinstance(expected, dict) or type(size) is not int or size < 0:
        raise SavedScorerError(f"{folder / CONFIG}: records no size and digest for {name}")
    data = _regular_file(path, size)
    if hashlib.sha256(data).hexdigest() != expected.get("sha256"):
        raise SavedScorerError(f"{path}: its SHA-256 is not the one {CONFIG} records (changed since it was saved)")
    return data


def _regular_file(path: Path, size: int | None) -> bytes:
    """The bytes of `path`, a regular file (not a link, a FIFO or a device) of `size` bytes
    (None: at most MAX_CONFIG_BYTES), both checked on the open file before it is read."""
    try:
        if stat.S_ISLNK(os.lstat(path).st_mode):
            raise SavedScorerError(f"{path}: is a symbolic link; a saved scorer's files are regular files in its "
                                   "folder")
        # O_NONBLOCK: opening a FIFO would otherwise wait for a writer; a regular file ignores it
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | NOFOLLOW | CLOEXEC)
    except OSError as error:
        reason = "is a symbolic link" if error.errno == errno.ELOOP else f"cannot be read ({error.strerror or error})"
        raise SavedScorerError(f"{path}: {reason}") from None
    try:
        _check_status(path, os.fstat(descriptor), size)
    except BaseException:
        os.close(descriptor)
        raise
    with os.fdopen(descriptor, "rb") as handle:
        try:
            data = handle.read((MAX_CONFIG_BYTES if size is None else size) + 1)  # the + 1: one that grew since
        except OSError as error:
            raise SavedScorerError(f"{path}: cannot be read ({error.strerror or error})") from None
    if size is not None and len(data) != size:
        raise SavedScorerError(f"{path}: {len(data)} bytes, but {CONFIG} says {size} (changed while read)")
    return data


def _check_status(path: Path, status: os.stat_result, size: int | None) -> None:
    if not stat.S_ISREG(status.st_mode):
        raise SavedScorerError(f"{path}: is not a regular file; a saved scorer's files are regular files")
    if size is None and status.st_size > MAX_CONFIG_BYTES:
        raise SavedScorerError(f"{path}: {status.st_size} bytes, more than a saved scorer's settings hold "
                               f"({MAX_CONFIG_BYTES})")
    if size is not None and status.st_size != size:
        raise SavedScorerError(f"{path}: {status.st_size} bytes, but {CONFIG} says {size} (truncated or replaced)")


def _section(path: Path, config: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    """scorer.json's `name` section, an object (refused naming `path` where it is something else)."""
    section = config.get(name)
    if not isinstance(section, dict):
        raise SavedScorerError(f"{path}: its {name!r} entry must be an object, not {section!r:.60}")
    return section


def _check_tensors(path: Path, tensors: Mapping[str, torch.Tensor], declared: Any) -> None:
    if not isinstance(declared, dict) or set(declared) != set(tensors):
        raise SavedScorerError(f"{path}: holds tensors {sorted(tensors)}, but {CONFIG} declares "
                               f"{sorted(declared) if isinstance(declared, dict) else declared!r}")
    for name, tensor in tensors.items():
        want = declared[name]
        got = {"dtype": str(tensor.dtype).removeprefix("torch."), "shape": list(tensor.shape)}
        if not isinstance(want, dict) or {"dtype": want.get("dtype"), "shape": want.get("shape")} != got:
            raise SavedScorerError(f"{path}: tensor {name!r} is {got['dtype']} {got['shape']}, but {CONFIG} "
                                   f"declares {want!r}")


def _training_set(path: Path, tensors: dict[str, torch.Tensor], config: Mapping[str, Any]) -> tuple[list[str], list[float]]:
    """The training texts and scores, taken out of `tensors`."""
    try:
        packed = tensors.pop(TEXTS), tensors.pop(TEXT_ENDS), tensors.pop(SCORES)
        texts = unpack_strings(packed[0], packed[1])
    except (KeyError, ValueError) as error:
        raise SavedScorerError(f"{path}: the training texts cannot be read ({error})") from None
    count = _section(path.parent / CONFIG, config, "training").get("count")
    if len(texts) != count or packed[2].shape != (len(texts),):
        raise SavedScorerError(f"{path}: {len(texts)} training texts and {packed[2].numel()} scores, but {CONFIG} "
                               f"says {count}")
    return texts, packed[2].tolist()


def _fields(path: Path, data: bytes, config: Mapping[str, Any], texts: list[str],
            scores: list[float]) -> dict[str, list[Any]]:
    """The fields kept beside the training texts, read from training.jsonl, whose texts and
    scores must be the tensors' (read only where there are fields)."""
    names = _section(path.parent / CONFIG, config, "training").get("fields", [])
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        raise SavedScorerError(f"{path.parent / CONFIG}: the training fields must be a list of names, not {names!r}")
    if not names:
        return {}
    records = _records(path, data)
    keys = {"text", "score", *names}
    bad = next((number for number, record in enumerate(records, start=1) if not _is_record(record, keys)), None)
    if bad is not None:
        raise SavedScorerError(f"{path}:{bad}: not a {{\"text\": string, \"score\": number}} record with "
                               f"the fields {CONFIG} names ({', '.join(names)})")
    if len(records) != len(texts):
        raise SavedScorerError(f"{path}: {len(records)} training texts, but {TENSORS} holds {len(texts)}")
    differ = next((number for number, (record, text, score) in enumerate(zip(records, texts, scores), start=1)
                   if record["text"] != text or float(record["score"]) != score), None)
    if differ is not None:
        raise SavedScorerError(f"{path}:{differ}: its text or score is not the one {TENSORS} holds")
    return {name: [record[name] for record in records] for name in names}


def _is_record(record: Any, keys: set[str]) -> bool:
    return (isinstance(record, dict) and record.keys() == keys and type(record["text"]) is str
            and type(record["score"]) in (float, int))


def _records(path: Path, data: bytes) -> list[Any]:
    """Every JSON line of `data`, parsed as one JSON array (half the time of a parse a line);
    where that fails, line by line to name the first bad line. Lines end at "\\n" alone: a text
    may hold any other line separator (U+2028, U+0085...), which JSON writes unescaped."""
    try:
        lines = data.decode("utf-8", errors="strict").removesuffix("\n").split("\n") if data else []
    except UnicodeDecodeError as error:
        raise SavedScorerError(f"{path}: not UTF-8 text ({error.reason} at byte {error.start})") from None
    try:
        records: list[Any] = json.loads("[" + ",".join(lines) + "]")
        if len(records) == len(lines):  # else a line held two values, or none
            return records
    except (ValueError, RecursionError):
        pass
    for number, line in enumerate(lines, start=1):
        try:
            json.loads(line)
        except ValueError:
            raise SavedScorerError(f"{path}:{number}: not a JSON line") from None
        except RecursionError:
            raise SavedScorerError(f"{path}:{number}: a value nested too deeply") from None
    raise SavedScorerError(f"{path}: not JSON lines (one record a line)")
