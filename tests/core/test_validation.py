"""The parameter table: what it refuses (booleans as numbers, out-of-range values), that the
constructor and the CLI are made from it, the Signature's line, and the not-fitted error."""
from __future__ import annotations

import argparse
import inspect
import json
import re

import pytest

from gpu_neighbors import NeighborsScorer, __version__
from gpu_neighbors.estimators import Threshold
from gpu_neighbors.cli import main
from gpu_neighbors.cli.parser import build_parser
from gpu_neighbors.core.signature import Signature
from gpu_neighbors.core.validation import (
    PARAMETERS,
    SCORER_PARAMETERS,
    NotFittedError,
    ParameterError,
    check_is_fitted,
    interval,
    validate_parameters,
)
from gpu_neighbors.cli.parts import parts_from_settings

TRAIN = ["the cat sat on the mat", "the cat sat on the mat today", "stocks fell sharply"]
QUALITY = [0.2, 0.4, 0.9]
NUMERIC = [name for name, parameter in PARAMETERS.items() if parameter.type in (int, float)]
# Settings the command line leaves to the library (BERTScore's kernel_options have their own flags).
LIBRARY_ONLY = {"kernel_options", "chunk_size", "progress"}


def fit(**settings):
    """A scorer from the command line's flat settings: checked against the table, then parts."""
    min_coverage = settings.pop("min_coverage", PARAMETERS["min_coverage"].default)
    validate_parameters({**settings, "min_coverage": min_coverage})
    return NeighborsScorer(device="cpu", **parts_from_settings(settings)).fit(TRAIN, QUALITY, min_coverage=min_coverage)


def test_every_numeric_setting_refuses_booleans():
    assert set(NUMERIC) == {"tau", "min_neighbors", "max_fraction", "power", "top_k", "penalty", "memory_budget", "chunk_size",
                            "min_coverage", "level", "outside_level"}
    for name in NUMERIC:
        for flag in (True, False):
            with pytest.raises(ParameterError, match=rf"^{name} must be .*, not {flag}$"):
                fit(**{name: flag})


@pytest.mark.parametrize(
    ("name", "refused", "accepted"),
    [
        ("tau", [float("nan"), float("inf"), "0.1"], [0, 0.08, -1.0]),
        ("min_neighbors", [0, -1, 2.0], [1, 5]),
        ("max_fraction", [0, 0.0, 1.01, float("nan")], [1, 0.66, 1e-9]),
        ("memory_budget", [0, 1.5, "1G"], [1, 1 << 20]),
        ("chunk_size", [0, 3.0], [1, 64]),
        ("min_coverage", [-0.01, 1.01, float("nan")], [0, 0.8, 1.0]),
        ("score_range", [(2, 1), (0, float("inf")), (0,), "01"], [(1, 5), [0.0, 1.0], (3, 3)]),
        ("kernel", [3, 1.0], ["bleu", None]),
        ("lowercase", [1, "yes", None], [True, False]),
        ("progress", [0], [True]),
        ("device", [0], ["cpu"]),
        ("tokenizer", [3, None], ["chars"]),
        ("kernel_options", [[("idf", True)]], [{}, None]),
    ],
)
def test_ranges_and_types_are_enforced(name, refused, accepted):
    for value in refused:
        with pytest.raises(ParameterError, match=re.escape(f"{name} must be {PARAMETERS[name].requirement}, not")):
            validate_parameters({name: value})
    for value in accepted:
        validate_parameters({name: value})


def test_an_integer_past_float_range_is_a_finite_number():
    """math.isfinite raises OverflowError on 10**400: such an int is judged by its bounds alone."""
    assert interval(0, integer=True).accepts(10**400)
    assert interval().accepts(10**400)
    assert not interval(high=1).accepts(10**400)
    assert not interval().accepts(float("inf"))


def test_bad_setting_is_refused_by_its_part_at_construction():
    with pytest.raises(ValueError, match="max_fraction must be a finite number in"):
        Threshold(max_fraction=True)
    with pytest.raises(ValueError, match="chunk_size must be an integer >= 1"):
        NeighborsScorer(chunk_size=0)


def test_the_run_settings_are_the_table():
    """The constructor takes the parts and the run's settings; the run's are the table's (the
    command line's flags), with its defaults."""
    parameters = list(inspect.signature(NeighborsScorer.__init__).parameters.values())[1:]
    assert [p.name for p in parameters] == ["kernel", "estimator", "level", "device", "memory_budget", "chunk_size",
                                            "progress", "score_range", "fluency"]
    for parameter in parameters[2:]:
        assert parameter.default == SCORER_PARAMETERS[parameter.name].default
    assert inspect.signature(NeighborsScorer.fit).parameters["min_coverage"].default == PARAMETERS["min_coverage"].default
    for parameter in PARAMETERS.values():
        parameter.check(parameter.default)


def _options(command: str) -> dict[str, argparse.Action]:
    parser = build_parser()
    subparsers = next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction))
    return {flag: action for action in subparsers.choices[command]._actions for flag in action.option_strings}


def test_cli_options_come_from_the_table():
    """A setting added to the table without an option fails here (or must be declared library-only)."""
    assert {name for name, parameter in PARAMETERS.items() if not parameter.cli} == LIBRARY_ONLY
    for command in ("score", "evaluate", "crossval"):
        options = _options(command)
        for parameter in PARAMETERS.values():
            if not parameter.cli:
                assert parameter.flag not in options
                continue
            action = options[parameter.flag]
            assert action.dest == parameter.name and action.default == parameter.default
            assert parameter.help in action.help
            if parameter.type is not bool:  # a flag's default is off
                shown = parameter.none_means if parameter.default is None else None
                assert "(default: " in action.help and (shown is None or f"(default: {shown})" in action.help)
    assert "(default: tuned, else the paper's 0.66)" in _options("score")["--max-fraction"].help
    assert "(default: 0 1)" in _options("score")["--score-range"].help
    assert _options("report")["--min-coverage"].default == PARAMETERS["min_coverage"].default
    assert "--kernel" not in _options("compare") and _options("compare")["--tau"].dest == "kernel_taus"


def test_tokenizer_help_lists_every_built_in_tokenizer():
    text = _options("score")["--tokenizer"].help
    assert all(name in text for name in ("whitespace", "13a", "chars", "Hugging Face"))


def test_cli_errors_name_flags(tmp_path, capsys):
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"text": t, "score": s}) + "\n" for t, s in zip(TRAIN, QUALITY)))
    for arguments, flag in [(["--min-neighbors", "0"], "--min-neighbors"), (["--score-range", "2", "1"], "--score-range"),
                            (["--max-fraction", "1.5"], "--max-fraction"), (["--min-coverage", "2"], "--min-coverage")]:
        assert main(["evaluate", "--data", str(data), *arguments]) == 2
        message = capsys.readouterr().err
        assert message.startswith(f"gpu-neighbors: error: {flag} must be ")
        assert PARAMETERS[flag[2:].replace("-", "_")].name not in message
    data.write_text(json.dumps({"text": "a b", "score": 3}) + "\n" + json.dumps({"text": "c d", "score": 0}) + "\n")
    assert main(["evaluate", "--data", str(data)]) == 2
    assert capsys.readouterr().err.rstrip().endswith("or set --score-range")


def test_signature_prints_the_old_line():
    signature = Signature("bleu", (("tok", "13a+lc"), ("smooth", "exp")), 0.1, 5, 0.66, 7, "0.1.0")
    assert str(signature) == "kernel:bleu|tok:13a+lc|smooth:exp|tau:0.1|a:5|b:0.66|n:7|version:0.1.0"
    scorer = fit(tau=0.1, smoothing="exp", tokenizer="13a", lowercase=True)
    assert scorer.signature == Signature("bleu", (("tok", "13a+lc"), ("smooth", "exp")), 0.1, 5, 0.66, 3, __version__,
                                         level=0.9, outside="0.05,lowest_decile,en")
    old = "|".join(f"{key}:{value}" for key, value in {
        "kernel": "bleu", **scorer.kernel_.settings(), "tau": f"{scorer.tau_:g}", "a": str(scorer.min_neighbors_),
        "b": f"{scorer.max_fraction_:g}", "n": str(scorer.num_train), "version": __version__}.items())
    # the intervals' level, then the outlier test's level and the negative evidence's rule close
    # the line: estimates, low and high change with them, so a resume must match them
    assert str(scorer.signature) == old + "|level:0.9|outside:0.05,lowest_decile,en"


def test_not_fitted_error():
    scorer = NeighborsScorer()
    assert issubclass(NotFittedError, ValueError) and issubclass(NotFittedError, AttributeError)
    assert issubclass(NotFittedError, RuntimeError)  # what unfitted calls raised before
    with pytest.raises(NotFittedError, match="this NeighborsScorer is not fitted yet"):
        check_is_fitted(scorer)
    for call in (lambda: scorer.predict(["a"]), scorer.leave_one_out, lambda: scorer.signature):
        with pytest.raises(NotFittedError):
            call()
    assert not hasattr(scorer, "num_train")  # an AttributeError, as scikit-learn's
    check_is_fitted(fit())


def test_public_surface():
    import gpu_neighbors

    assert {"NeighborsScorer", "NotFittedError", "check_is_fitted", "InputError", "Signature"} <= set(gpu_neighbors.__all__)
    assert gpu_neighbors.NotFittedError is NotFittedError and gpu_neighbors.check_is_fitted is check_is_fitted
    for name in gpu_neighbors.__all__:
        if name != "NeighborsQuality":  # loads torchmetrics, an optional extra
            getattr(gpu_neighbors, name)
