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
complete one (the discipline of `data/output.py`, which sits above the scorer and so cannot be
imported here). Reading never unpickles and never runs code from the folder: JSON, safetensors
and JSON lines only, and every file is checked against scorer.json (size, digest, then dtypes
and shapes) before it is used. Each refusal is one line naming the file.
"""
from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

FORMAT = "gpu-neighbors scorer"
# 2: the training texts and scores are in the tensors (1 kept them in training.jsonl alone);
# 3: the typicality tables count the training texts' characters; 4: the degeneracy score; 5: the
# outlier test has the spelling statistic (five typicality columns, five degeneracy weights); 6:
# the fluency part (its model's name and SHA-256, the stacked estimate, the outlier test's column);
# a folder of another version is refused in one line
FORMAT_VERSION = 6
CONFIG, TENSORS, TRAINING = "scorer.json", "tensors.safetensors", "training.jsonl"
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
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
    folder, a saved scorer there unless `overwrite` (`replace` says how to ask for it), and a
    folder holding anything else."""
    folder = Path(folder)
    if not folder.is_dir():
        if folder.exists():
            raise FileExistsError(f"{folder}: is a file, not a folder to save a scorer in")
        return
    if (folder / CONFIG).exists() and not overwrite:
        raise FileExistsError(f"{folder / CONFIG}: a saved scorer is already there; {replace} to replace it")
    strangers = sorted(path.name for path in folder.iterdir()
                       if path.name not in (CONFIG, TENSORS, TRAINING) and not path.name.endswith(".partial"))
    if strangers:
        raise FileExistsError(f"{folder}: holds {', '.join(strangers[:3])}, not a saved scorer: choose an empty folder")


def write(folder: str | os.PathLike[str], saved: SavedScorer, overwrite: bool = False) -> Path:
    """Write `saved` to `folder` (made if missing); a folder that already holds a scorer is
    replaced only with `overwrite`, and one that holds anything else never."""
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
    folder.mkdir(parents=True, exist_ok=True)  # only now: a save refused above leaves no folder behind
    for name in (TENSORS, TRAINING, CONFIG):  # scorer.json last: its presence means complete
        _write_atomically(folder / name, payloads[name])
    return folder


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
    partial.unlink(missing_ok=True)  # a stale one, or a planted link: removing a link never follows it
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o666)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(partial, path)
    if os.name == "posix":
        directory = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)


def read(folder: str | os.PathLike[str]) -> SavedScorer:
    """The folder's scorer, every file checked against scorer.json before it is used."""
    from safetensors import SafetensorError
    from safetensors.torch import load

    folder = Path(folder)
    config_path = folder / CONFIG
    if not folder.is_dir() or not config_path.is_file():
        raise SavedScorerError(f"{folder}: not a saved scorer (no {CONFIG} in it)")
    try:
        config = json.loads(config_path.read_bytes())
    except (ValueError, UnicodeDecodeError) as error:
        raise SavedScorerError(f"{config_path}: not a saved scorer's settings (not JSON: {error})") from None
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
    expected = (config.get("files") or {}).get(name)
    if not isinstance(expected, dict):
        raise SavedScorerError(f"{folder / CONFIG}: records no size and digest for {name}")
    try:
        data = path.read_bytes()
    except OSError as error:
        raise SavedScorerError(f"{path}: cannot be read ({error.strerror or error})") from None
    if len(data) != expected.get("size"):
        raise SavedScorerError(f"{path}: {len(data)} bytes, but {CONFIG} says {expected.get('size')} "
                               "(truncated or replaced)")
    if hashlib.sha256(data).hexdigest() != expected.get("sha256"):
        raise SavedScorerError(f"{path}: its SHA-256 is not the one {CONFIG} records (changed since it was saved)")
    return data


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
    count = (config.get("training") or {}).get("count")
    if len(texts) != count or packed[2].shape != (len(texts),):
        raise SavedScorerError(f"{path}: {len(texts)} training texts and {packed[2].numel()} scores, but {CONFIG} "
                               f"says {count}")
    return texts, packed[2].tolist()


def _fields(path: Path, data: bytes, config: Mapping[str, Any], texts: list[str],
            scores: list[float]) -> dict[str, list[Any]]:
    """The fields kept beside the training texts, read from training.jsonl, whose texts and
    scores must be the tensors' (read only where there are fields)."""
    names = (config.get("training") or {}).get("fields", [])
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
    except ValueError:
        pass
    for number, line in enumerate(lines, start=1):
        try:
            json.loads(line)
        except ValueError:
            raise SavedScorerError(f"{path}:{number}: not a JSON line") from None
    raise SavedScorerError(f"{path}: not JSON lines (one record a line)")
