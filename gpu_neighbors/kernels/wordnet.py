"""Find WordNet for the METEOR kernel's synonym stage.

NLTK's reader (`nltk.corpus.wordnet`) looks for a folder `corpora/wordnet/` on `nltk.data.path`.
Where NLTK has no WordNet of its own, the WordNet 3.0 dictionary files that Debian installs
(`apt-get install -y wordnet-base wordnet-sense-index`, files under /usr/share/wordnet) serve
instead: they lack only the `lexnames` file, which Debian documents as a table in the
lexnames(5WN) man page, so it is written here from that table. The files are copied into a
per-user cache folder rather than symlinked, because NLTK refuses to open a corpus file whose
real path lies outside the corpus folder.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from functools import cache, partial
from pathlib import Path
from typing import TYPE_CHECKING

from gpu_neighbors.core.caller_warnings import warn

if TYPE_CHECKING:
    from nltk.corpus.reader.wordnet import WordNetCorpusReader

APT_INSTALL = "apt-get install -y wordnet-base wordnet-sense-index"

# The files NLTK's reader opens: the first group is needed to look up synsets, the second
# (sense keys and counts) only by other lookups, so it is copied where present.
REQUIRED_FILES = (
    "index.noun", "index.verb", "index.adj", "index.adv",
    "data.noun", "data.verb", "data.adj", "data.adv",
    "noun.exc", "verb.exc", "adj.exc", "adv.exc",
)
OPTIONAL_FILES = ("index.sense", "cntlist.rev")

# Lexicographer file names in file-number order (00..44), as the lexnames(5WN) man page lists.
LEXICOGRAPHER_FILES = (
    "adj.all", "adj.pert", "adv.all", "noun.Tops", "noun.act", "noun.animal", "noun.artifact",
    "noun.attribute", "noun.body", "noun.cognition", "noun.communication", "noun.event",
    "noun.feeling", "noun.food", "noun.group", "noun.location", "noun.motive", "noun.object",
    "noun.person", "noun.phenomenon", "noun.plant", "noun.possession", "noun.process",
    "noun.quantity", "noun.relation", "noun.shape", "noun.state", "noun.substance", "noun.time",
    "verb.body", "verb.change", "verb.cognition", "verb.communication", "verb.competition",
    "verb.consumption", "verb.contact", "verb.creation", "verb.emotion", "verb.motion",
    "verb.perception", "verb.possession", "verb.social", "verb.stative", "verb.weather",
    "adj.ppl",
)
# The man page's syntactic-category numbers, keyed by the file name's prefix.
_CATEGORY_NUMBERS = {"noun": 1, "verb": 2, "adj": 3, "adv": 4}


def lexnames_text() -> str:
    """The `lexnames` file: `NN<TAB>name<TAB>category` per lexicographer file."""
    return "".join(
        f"{number:02d}\t{name}\t{_CATEGORY_NUMBERS[name.split('.')[0]]}\n"
        for number, name in enumerate(LEXICOGRAPHER_FILES)
    )


def dictionary_folders() -> list[Path]:
    """Where WordNet's own tools look for the dictionary (WNSEARCHDIR, then WNHOME/dict), then
    Debian's and the upstream default install folders."""
    folders = []
    if os.environ.get("WNSEARCHDIR"):
        folders.append(Path(os.environ["WNSEARCHDIR"]))
    if os.environ.get("WNHOME"):
        folders.append(Path(os.environ["WNHOME"]) / "dict")
    folders += [Path("/usr/share/wordnet"), Path("/usr/local/WordNet-3.0/dict")]
    return folders


def find_dictionary() -> Path | None:
    """The first folder that holds every file the synset lookups need."""
    for folder in dictionary_folders():
        if all((folder / name).is_file() for name in REQUIRED_FILES):
            return folder
    return None


def cache_data_root() -> Path:
    """The NLTK data folder this package manages: $XDG_CACHE_HOME (or ~/.cache)/gpu-neighbors/nltk_data."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "gpu-neighbors" / "nltk_data"


def build_nltk_corpus(dictionary: Path, data_root: Path) -> Path:
    """Make `data_root/corpora/wordnet` an NLTK WordNet corpus from a WordNet dictionary folder.

    Files already there with the source's size are kept; every write goes through a temporary
    file and a rename, so concurrent processes never see a half-written file.
    """
    corpus = data_root / "corpora" / "wordnet"
    corpus.mkdir(parents=True, exist_ok=True)
    for name in REQUIRED_FILES + OPTIONAL_FILES:
        source, target = dictionary / name, corpus / name
        if source.is_file() and not (
            target.is_file() and target.stat().st_size == source.stat().st_size
        ):
            _atomic_write(target, partial(shutil.copyfile, source))
    lexnames = corpus / "lexnames"
    if not lexnames.is_file() or lexnames.read_text() != lexnames_text():
        _atomic_write(lexnames, lambda path: Path(path).write_text(lexnames_text()))
    return corpus


def _atomic_write(target: Path, write: Callable[[str], object]) -> None:
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    os.close(handle)
    try:
        write(temporary)
        os.replace(temporary, target)
    except BaseException:
        os.unlink(temporary)
        raise


def _nltk_wordnet() -> WordNetCorpusReader | None:
    """NLTK's WordNet reader if it finds data on `nltk.data.path`, else None."""
    from nltk.corpus import wordnet

    try:
        wordnet.ensure_loaded()
    except LookupError:
        return None
    return wordnet


@cache
def load_wordnet() -> WordNetCorpusReader | None:
    """NLTK's WordNet reader, set up from the system's WordNet dictionary when NLTK has none of
    its own; None (with one warning per process) when there is no usable WordNet."""
    import nltk

    reader = _nltk_wordnet()
    if reader is not None:
        return reader
    dictionary = find_dictionary()
    if dictionary is None:
        searched = ", ".join(str(folder) for folder in dictionary_folders())
        _without_wordnet(f"no WordNet in NLTK's data or in {searched}")
        return None
    data_root = cache_data_root()
    try:
        build_nltk_corpus(dictionary, data_root)
    except OSError as error:
        _without_wordnet(f"cannot set up WordNet from {dictionary} in {data_root}: {error}")
        return None
    if str(data_root) not in nltk.data.path:
        nltk.data.path.append(str(data_root))
    reader = _nltk_wordnet()
    if reader is None:
        _without_wordnet(f"NLTK cannot read the WordNet in {data_root}")
    return reader


def _without_wordnet(reason: str) -> None:
    warn(
        f"{reason}: METEOR runs without its synonym stage (exact and stem matches only); "
        f"install WordNet with `{APT_INSTALL}`")


class LazyWordNet:
    """NLTK's WordNet reader, opened on first use in each process. The reader holds open files,
    which do not pickle, so a fitted METEOR kernel sent to another process (a Ray worker, a
    saved scorer) carries only the WordNet version its numbers were made with, opens WordNet
    there when it first needs a synonym, and refuses one of another version (or none), whose
    synonyms would change the numbers."""

    def __init__(self, version: str) -> None:
        self.version = version
        self._reader: WordNetCorpusReader | None = None

    @classmethod
    def opened(cls, reader: WordNetCorpusReader) -> LazyWordNet:
        lazy = cls(reader.get_version())
        lazy._reader = reader
        return lazy

    def reader(self) -> WordNetCorpusReader:
        if self._reader is None:
            reader = load_wordnet()
            found = reader.get_version() if reader is not None else "none"
            if reader is None or found != self.version:
                raise RuntimeError(
                    f"this METEOR kernel was fitted with WordNet {self.version}, and here there is {found}: "
                    f"its synonyms would change the numbers; install WordNet {self.version} with `{APT_INSTALL}`")
            self._reader = reader
        return self._reader

    def __getstate__(self) -> dict[str, object]:
        return {"version": self.version, "_reader": None}

