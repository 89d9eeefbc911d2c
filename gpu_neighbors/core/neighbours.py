"""The neighbour model shared by every kernel.

A similarity tile [candidates, training block] is reduced at once to per-candidate sufficient
statistics (count, sum q, sum q^2 of the neighbours; `NeighborReduction`) and freed; statistics of training blocks
add up, so nothing of size [C x |S|] is ever kept. The a/b rule then turns the statistics into
estimates. The model never knows which kernel made the tiles.

Sums are exact integers (q in fixed point, split into two 26-bit limbs, with one scale per
magnitude band of q, so a huge score cannot take the digits of the others), so they do not
depend on how the training set is cut into blocks or in which order blocks arrive: the same
inputs give bit-identical estimates for every chunk size and device. Similarity-weighted sums stay
exact the same way: a weight k(x, s)^p is quantised to a whole number of 2^-20 units and q is
cut into four 13-bit limbs, so every product and every sum of up to 2^19 of them is an integer
a float64 matmul holds exactly.
"""
from __future__ import annotations

import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from gpu_neighbors.core.portable import rounded_sqrt
from gpu_neighbors.core.tiling import Tile

LIMB_BITS = 26  # a float64 matmul sums up to 2^27 such limbs exactly
MANTISSA_BITS = 52
# Weighted sums: weights in units of 2^-WEIGHT_BITS times limbs of WEIGHTED_LIMB_BITS bits make
# products below 2^33, and a matmul over at most WEIGHTED_COLUMNS of them stays below 2^52.
WEIGHT_BITS = 20
WEIGHTED_LIMB_BITS = 13
WEIGHTED_COLUMNS = 1 << 19


def quantised_weights(similarity: torch.Tensor, power: float) -> torch.Tensor:
    """Neighbour weights k^p (k clamped to [0, 1]) as whole numbers of 2^-20 units, at least
    one, in float64: integers, so sums of their products with q limbs are exact. p = 0 is the
    plain mean (every weight one unit).

    p is a multiple of 1/2 (`check_power`), and k^p is built from multiplications and one square
    root (`portable.rounded_sqrt`: torch's CPU root is an ulp off now and then) in a fixed order: rounded the
    same way on every device, where a library `pow` may not be, and a weight an ulp off can round
    to another unit."""
    if power == 0:
        return torch.ones_like(similarity, dtype=torch.float64)
    base = similarity.to(torch.float64).clamp(0.0, 1.0)
    whole, half = divmod(check_power(power), 1.0)
    weights = rounded_sqrt(base) if half else torch.ones_like(base)
    square = base
    exponent = int(whole)
    while exponent:  # binary powering: base^whole as a product of repeated squares
        if exponent & 1:
            weights = weights * square
        exponent >>= 1
        if exponent:
            square = square * square
    return torch.round(weights * 2.0**WEIGHT_BITS).clamp(min=1.0)


def check_power(power: float) -> float:
    """A weight power must be a non-negative multiple of 1/2 (see `quantised_weights`)."""
    if not (power >= 0 and float(power * 2).is_integer()):
        raise ValueError(f"the weight power p must be a non-negative multiple of 0.5 (0, 0.5, 1, 1.5, ...), "
                         f"not {power!r}: k^p is computed the same way on every device only for those")
    return float(power)


def decode_limbs(limb_sums: torch.Tensor, bits: int, shift: int,
                 divisor: torch.Tensor | None = None) -> torch.Tensor:
    """float64 value of exact limb sums [rows, limbs] (most significant first), divided by
    `divisor` if given, rounded in one fixed sequence of operations, so equal sums give equal
    bits. The division comes before the scale: a mean near the float64 limit is finite even
    where the sum is not (a power-of-two scale is exact, so the order changes nothing else)."""
    sums = limb_sums.to(torch.float64)
    total = sums[:, 0]
    for limb in range(1, sums.shape[1]):
        total = total * 2.0**bits + sums[:, limb]
    if divisor is not None:
        total = total / divisor
    return times_power_of_two(total, -shift)


def times_power_of_two(values: torch.Tensor, exponent: int) -> torch.Tensor:
    """values * 2^exponent, exact wherever the result is a normal float: in two steps, since
    2^exponent alone overflows (or is subnormal) beyond |exponent| ~ 1022, as the scales of
    scores near 1e-300 or 1e300 need."""
    half = exponent // 2
    return values * 2.0**half * 2.0 ** (exponent - half)


@dataclass(frozen=True)
class FixedPoint:
    """Values as integers value * 2^shift split into two limbs (high * 2^26 + low), each held
    in float64 so sums over up to 2^27 of them are exact in a matmul on any device."""

    high: torch.Tensor
    low: torch.Tensor
    shift: int

    @classmethod
    def encode(cls, values: torch.Tensor) -> FixedPoint:
        largest = float(values.abs().max()) if values.numel() else 0.0
        shift = MANTISSA_BITS - (math.frexp(largest)[1] if largest > 0 else 0)
        fixed = torch.round(times_power_of_two(values, shift)).to(torch.int64)
        high = torch.div(fixed, 2**LIMB_BITS, rounding_mode="floor")
        low = fixed - high * 2**LIMB_BITS
        return cls(high.to(torch.float64), low.to(torch.float64), shift)

    def block(self, start: int, stop: int) -> FixedPoint:
        return FixedPoint(self.high[start:stop], self.low[start:stop], self.shift)

    def decode(self, limb_sums: torch.Tensor) -> torch.Tensor:
        """float64 values of limb sums, rounded once (deterministically)."""
        return decode_limbs(limb_sums, LIMB_BITS, self.shift)

    def fine_limbs(self) -> torch.Tensor:
        """The same integers cut into MANTISSA_BITS / WEIGHTED_LIMB_BITS limbs of 13 bits
        [n, 4] (float64, most significant first), for exact weighted sums."""
        fixed = self.high.to(torch.int64) * 2**LIMB_BITS + self.low.to(torch.int64)
        limbs = []
        for _ in range(MANTISSA_BITS // WEIGHTED_LIMB_BITS - 1):
            upper = torch.div(fixed, 2**WEIGHTED_LIMB_BITS, rounding_mode="floor")
            limbs.append(fixed - upper * 2**WEIGHTED_LIMB_BITS)
            fixed = upper
        limbs.append(fixed)
        return torch.stack(limbs[::-1], dim=1).to(torch.float64)


def text_checksums(texts: Sequence[str]) -> np.ndarray:
    """CRC-32 of each text's UTF-8 bytes (int64): a key that follows the text wherever it sits."""
    return np.fromiter((zlib.crc32(text.encode("utf-8", "surrogatepass")) for text in texts),
                       dtype=np.int64, count=len(texts))


def canonical_order(checksums: np.ndarray | None, quality: np.ndarray) -> np.ndarray:
    """The training texts' positions in the order (text checksum, q, position): an order of the
    set of (text, q) pairs, whatever order they came in (two texts whose order falls to their
    positions have the same checksum and the same q, so swapping them changes nothing). Without
    checksums the order is (q, position)."""
    positions = np.arange(quality.size)
    return np.lexsort((positions, quality) if checksums is None else (positions, quality, checksums))


def tie_ranks(checksums: np.ndarray | None, quality: np.ndarray) -> np.ndarray:
    """Each training text's place (int64, distinct) in `canonical_order`: how the top-k
    reduction breaks ties in similarity."""
    ranks = np.empty(quality.size, dtype=np.int64)
    ranks[canonical_order(checksums, quality)] = np.arange(quality.size)
    return ranks


def canonical_sample(order: np.ndarray, size: int, seed: int) -> np.ndarray:
    """`size` of the positions in `order` (a `canonical_order`), drawn by a seeded choice of places
    in that order, sorted: the same texts whatever order the training set came in; all of them
    (sorted) where there are no more."""
    if order.size <= size:
        return np.sort(order)
    return np.sort(order[np.random.default_rng(seed).choice(order.size, size, replace=False)])


BAND_BITS = 8  # q within one band are less than 2^8 apart in magnitude (see `magnitude_bands`)


def magnitude_bands(quality: np.ndarray) -> np.ndarray:
    """Each q's band (int64, 0 for the largest magnitudes): a band starts at the largest binary
    exponent not yet placed and holds every q less than 2^BAND_BITS below it (zeros go to band
    0). Each band has its own fixed-point scale, so a q loses at most BAND_BITS of its 52 bits
    to the largest of its band, never its digits to a huge score elsewhere in the training set.
    The bands depend only on the set of values, so on no order, chunk or device."""
    exponents = np.frexp(np.abs(quality))[1]
    nonzero = quality != 0
    bands = np.zeros(quality.size, dtype=np.int64)
    if not nonzero.any():
        return bands
    distinct = np.unique(exponents[nonzero])[::-1]
    band_of_exponent, band, top = {}, 0, int(distinct[0])
    for exponent in distinct.tolist():
        if exponent <= top - BAND_BITS:
            band, top = band + 1, exponent
        band_of_exponent[exponent] = band
    bands[nonzero] = [band_of_exponent[exponent] for exponent in exponents[nonzero].tolist()]
    return bands


@dataclass(frozen=True)
class Band:
    """The fixed-point scales of one magnitude band: q as integers q * 2^values_shift; d, the
    band's deviations (q - centre) * 2^-scale with centre the middle of the band's range and
    2^scale its half-width, so |d| <= 1, and d^2 as integers d^2 * 2^squares_shift. The spread
    is computed from d, which neither overflows (q^2 does from |q| ~ 1e154) nor loses the
    spread to cancellation (scores of 1e6 + q)."""

    values_shift: int
    squares_shift: int
    centre: float
    scale: int


@dataclass(frozen=True)
class Quality:
    """The training set's q, ready for exact neighbour sums, band by band (`magnitude_bands`):
    `columns` [n, 5 * bands] (per band: a one where the text is in it, the limbs of q, the limbs
    of d^2; zeros elsewhere) for counts and plain sums, `weighted_columns` [n, 9 * bands] (per
    band: the one, q and d^2 in 13-bit limbs) for similarity-weighted sums, `raw` q in float64,
    and `tie_rank`, the texts' order among equally similar ones (`tie_ranks`)."""

    columns: torch.Tensor
    weighted_columns: torch.Tensor
    raw: torch.Tensor
    tie_rank: torch.Tensor
    bands: tuple[Band, ...]

    @classmethod
    def encode(cls, quality: torch.Tensor, checksums: np.ndarray | None = None) -> Quality:
        """q of a training set; `checksums` (`text_checksums` of its texts) order its ties."""
        quality = quality.to(torch.float64)
        host = quality.cpu().numpy()
        ranks = torch.from_numpy(tie_ranks(checksums, host)).to(quality.device)
        band_of = magnitude_bands(host)
        columns, weighted, bands = [], [], []
        for band in range(int(band_of.max()) + 1 if host.size else 1):
            member = torch.from_numpy(band_of == band).to(quality.device)
            if host.size:
                inside = host[band_of == band]
                low, high = float(inside.min()), float(inside.max())
                centre = low / 2 + high / 2  # no overflow near the float64 limit
                half_width = max(high - centre, centre - low)
                scale = math.frexp(half_width)[1] if half_width > 0 else 0
            else:
                centre, scale = 0.0, 0
            values = torch.where(member, quality, 0.0)
            deviation = torch.where(member, times_power_of_two(values - centre, -scale), 0.0)
            fixed, squares = FixedPoint.encode(values), FixedPoint.encode(deviation * deviation)
            one = member.to(torch.float64)
            columns += [one, fixed.high, fixed.low, squares.high, squares.low]
            weighted += [one[:, None], fixed.fine_limbs(), squares.fine_limbs()]
            bands.append(Band(fixed.shift, squares.shift, centre, scale))
        return cls(torch.stack(columns, dim=1), torch.cat(weighted, dim=1), quality, ranks, tuple(bands))

    def block(self, start: int, stop: int) -> Quality:
        return Quality(self.columns[start:stop], self.weighted_columns[start:stop], self.raw[start:stop],
                       self.tie_rank[start:stop], self.bands)

    def to(self, device: torch.device) -> Quality:
        """The same limbs on `device` (a copy, so the same bits)."""
        return Quality(self.columns.to(device), self.weighted_columns.to(device), self.raw.to(device),
                       self.tie_rank.to(device), self.bands)

    @property
    def device(self) -> torch.device:
        return self.columns.device


ESTIMATORS = ("threshold", "topk", "ridge")


@dataclass(frozen=True)
class Thresholds:
    """The settings of the neighbour model: tau, a (min_neighbors), b (max_fraction) of the
    paper's threshold rule; the weight power p (0: the plain mean); and which estimator uses
    them: "threshold" (the paper's rule) or "topk" (the weighted mean of the top_k most similar
    training texts, which ignores tau, a and b)."""

    tau: float
    min_neighbors: int
    max_fraction: float
    power: float = 0.0
    estimator: str = "threshold"
    top_k: int | None = None
    penalty: float | None = None

    def __post_init__(self) -> None:
        if self.estimator not in ESTIMATORS:
            raise ValueError(f"estimator must be one of {', '.join(ESTIMATORS)}, not {self.estimator!r}")
        if self.estimator == "topk" and (self.top_k is None or self.top_k < 1):
            raise ValueError(f"the topk estimator needs top_k >= 1, not {self.top_k!r}")
        if self.penalty is not None and not self.penalty > 0:
            raise ValueError(f"the ridge penalty must be > 0 (or None: chosen by leave-one-out), not {self.penalty!r}")

    def summary(self) -> str:
        """The settings the estimator uses, as reports print them."""
        if self.estimator == "topk":
            return f"top-k, k={self.top_k}, p={self.power:g}"
        if self.estimator == "ridge":
            return "ridge, penalty=" + ("loo" if self.penalty is None else f"{self.penalty:.4g}")
        text = f"tau={self.tau:.4g}, a={self.min_neighbors}, b={self.max_fraction:g}"
        return text + (f", p={self.power:g}" if self.power else "")

    def as_dict(self) -> dict[str, float | int | str]:
        """tau, a and b; p, the estimator and k only where they differ from the paper's model."""
        settings: dict[str, float | int | str] = {
            "tau": self.tau, "min_neighbors": self.min_neighbors, "max_fraction": self.max_fraction
        }
        if self.power:
            settings["power"] = self.power
        if self.estimator == "topk":
            settings.update(estimator=self.estimator, top_k=int(self.top_k or 0))
        elif self.estimator == "ridge":
            settings.update(estimator=self.estimator, penalty=float(self.penalty or 0.0))
        return settings


@dataclass(frozen=True)
class TrainingSubset:
    """Training texts allowed to be neighbours (bool [|S|] on the device) and how many there are,
    as a host integer so the b |S| bound needs no device read (subsampled rewards)."""

    mask: torch.Tensor
    size: int


@dataclass
class NeighborStats:
    """Per-candidate neighbour count and, per magnitude band of q (`Quality`), exact limb sums
    of q and d^2 and the band's weight; additive across blocks.

    Weighted (power > 0): `weight` holds the sums of the quantised weights and the totals are
    sums of weight x q in 13-bit limbs; unweighted, `weight` counts the neighbours in each band
    and the totals are plain sums in 26-bit limbs."""

    count: torch.Tensor  # int64 [rows]
    weight: torch.Tensor  # int64 [rows, bands]: neighbours, or their weights in 2^-20 units
    total: torch.Tensor  # int64 [rows, bands, limbs], limbs of sum (w) q
    total_sq: torch.Tensor  # int64 [rows, bands, limbs], limbs of sum (w) d^2 (d: the band's deviations)
    power: float = 0.0

    @classmethod
    def zeros(cls, rows: int, bands: int, device: torch.device, power: float = 0.0,
              weighted: bool | None = None) -> NeighborStats:
        """Empty statistics; `weighted` (default: power > 0) sums `Quality.weighted_columns`."""
        width = MANTISSA_BITS // (WEIGHTED_LIMB_BITS if (power != 0 if weighted is None else weighted) else LIMB_BITS)

        def zeros(*shape: int) -> torch.Tensor:
            return torch.zeros(shape, dtype=torch.int64, device=device)

        return cls(zeros(rows), zeros(rows, bands), zeros(rows, bands, width), zeros(rows, bands, width),
                   float(power))

    @property
    def limb_bits(self) -> int:
        return MANTISSA_BITS // self.total.shape[2]

    def add_sums(self, rows: slice, sums: torch.Tensor) -> torch.Tensor:
        """Adds column sums [rows, columns] (int64) of `Quality.columns` or, weighted, of
        `Quality.weighted_columns` to rows `rows`; returns their weights summed over the bands
        (unweighted: the neighbours)."""
        bands = self.weight.shape[1]
        per_band = sums.reshape(sums.shape[0], bands, sums.shape[1] // bands)  # explicit: rows may be 0
        width = self.total.shape[2]
        self.weight[rows] += per_band[:, :, 0]
        self.total[rows] += per_band[:, :, 1 : 1 + width]
        self.total_sq[rows] += per_band[:, :, 1 + width :]
        return per_band[:, :, 0].sum(dim=1)

    def add_tile(
        self,
        tile: torch.Tensor,
        quality: Quality,
        tau: float,
        excluded: torch.Tensor | None = None,
        first: int = 0,
    ) -> None:
        """Add the neighbours found in `tile` (similarities >= tau) to rows first.. .
        `quality` holds q of the tile's training texts; `excluded` is a boolean mask of pairs
        that must not count (leave-one-out: a text is not its own neighbour)."""
        is_neighbor = tile >= tau
        if excluded is not None:
            is_neighbor &= ~excluded
        rows = slice(first, first + tile.shape[0])
        if self.power == 0:
            # One pass over the tile for everything: a column of ones per band counts the
            # neighbours (exactly, as the limbs), so the tile is read once by a single matmul.
            self.count[rows] += self.add_sums(rows, (is_neighbor.to(torch.float64) @ quality.columns).to(torch.int64))
            return
        weights = torch.where(is_neighbor, quantised_weights(tile, self.power), 0.0)
        self.count[rows] += is_neighbor.sum(dim=1)
        for start in range(0, tile.shape[1], WEIGHTED_COLUMNS):
            part = slice(start, start + WEIGHTED_COLUMNS)
            sums = (weights[:, part] @ quality.weighted_columns[part]).to(torch.int64)
            self.add_sums(rows, sums)


class NeighborReduction:
    """Neighbour statistics of candidate rows 0..rows-1, tile by tile (the scorer's reduction).

    leave_one_out: the candidates are the training set itself, and row i is not a neighbour of
    itself (the tile's offsets say which pairs are the diagonal). subset: only those training
    texts can be neighbours (subsampled rewards). Statistics are exact integers, so neither the
    tiling nor the order of tiles changes a bit."""

    def __init__(
        self,
        rows: int,
        quality: Quality,
        tau: float,
        *,
        leave_one_out: bool = False,
        subset: TrainingSubset | None = None,
        power: float = 0.0,
    ) -> None:
        self.stats = NeighborStats.zeros(rows, len(quality.bands), quality.device, power)
        self.quality = quality
        self.tau = tau
        self.leave_one_out = leave_one_out
        self.subset = subset

    def add(self, tile: Tile) -> None:
        start, stop = tile.column, tile.column + tile.values.shape[1]
        excluded = excluded_pairs(tile, self.leave_one_out, self.subset)
        self.stats.add_tile(tile.values, self.quality.block(start, stop), self.tau, excluded, tile.row)

    def result(self) -> NeighborStats:
        return self.stats


def excluded_pairs(tile: Tile, leave_one_out: bool, subset: TrainingSubset | None) -> torch.Tensor | None:
    """Pairs of `tile` that may not be neighbours (bool [rows, columns]), None when all may:
    leave-one-out, a text and itself (the tile's offsets say which pairs are the diagonal);
    with a subset, training texts outside it."""
    rows, columns = tile.values.shape
    start, stop = tile.column, tile.column + columns
    excluded = None
    if leave_one_out and tile.row < stop and start < tile.row + rows:
        device = tile.values.device
        candidate = torch.arange(tile.row, tile.row + rows, device=device)
        excluded = candidate[:, None] == torch.arange(start, stop, device=device)[None, :]
    if subset is not None:
        outside = ~subset.mask[None, start:stop].expand(rows, columns)
        excluded = outside if excluded is None else excluded | outside
    return excluded


class NearestReduction:
    """Each candidate row's highest similarity to a training text (-inf where none may be a
    neighbour): the evidence an estimate rests on. Pairs are excluded as `NeighborReduction`
    excludes them; a maximum is exact, so the same bits in any tiling."""

    def __init__(self, rows: int, device: torch.device, leave_one_out: bool = False,
                 subset: TrainingSubset | None = None) -> None:
        self.nearest = torch.full((rows,), -torch.inf, dtype=torch.float64, device=device)
        self.leave_one_out, self.subset = leave_one_out, subset

    def add(self, tile: Tile) -> None:
        values = tile.values.to(torch.float64)
        excluded = excluded_pairs(tile, self.leave_one_out, self.subset)
        if excluded is not None:
            values = values.masked_fill(excluded, -torch.inf)
        part = slice(tile.row, tile.row + values.shape[0])
        if values.shape[1]:
            self.nearest[part] = torch.maximum(self.nearest[part], values.amax(dim=1))

    def result(self) -> torch.Tensor:
        return self.nearest


@dataclass(frozen=True)
class Neighbors:
    """The k most similar training texts of each candidate, most similar first (ties: lower
    training index first): index -1 and NaN similarity and score where fewer than k exist."""

    index: np.ndarray  # int64 [candidates, k]
    similarity: np.ndarray  # float64 [candidates, k]
    score: np.ndarray  # float64 [candidates, k], the training texts' known q

    def rows(self, candidate: int) -> list[dict[str, float | int]]:
        """One candidate's neighbours as records {index, similarity, score}."""
        valid = self.index[candidate] >= 0
        return [
            {"index": int(index), "similarity": float(similarity), "score": float(score)}
            for index, similarity, score in zip(
                self.index[candidate][valid], self.similarity[candidate][valid], self.score[candidate][valid]
            )
        ]


@dataclass(frozen=True)
class Prediction:
    """Estimates for a batch of candidates (numpy, in input order)."""

    scores: np.ndarray  # float64, NaN where undefined
    num_neighbors: np.ndarray  # int64
    std: np.ndarray  # float64, spread of the neighbours' q; NaN where undefined
    covered: np.ndarray  # bool
    estimator: str = "threshold"  # which estimator made the estimates: threshold or topk
    neighbors: Neighbors | None = None  # with predict(return_neighbors=k)
    low: np.ndarray | None = None  # float64 conformal interval (`conformal.py`), NaN where undefined
    high: np.ndarray | None = None
    nearest: np.ndarray | None = None  # float64: the highest similarity to a training text (-inf: none)
    outside: np.ndarray | None = None  # bool: outside the training distribution (`outside.py`)
    typicality: np.ndarray | None = None  # float64: its p-value under the training distribution (`outside.py`)

    @property
    def coverage(self) -> float:
        """Share of candidates with an estimate (the paper's Definition 3.3); NaN for none."""
        return float(self.covered.mean()) if self.covered.size else float("nan")

    def __len__(self) -> int:
        return int(self.scores.size)


@dataclass(frozen=True)
class TensorPrediction:
    """`Prediction` as torch tensors left on the device that computed them, so training loops
    (rewards, metrics) use them without a host round trip."""

    scores: torch.Tensor  # float64, NaN where undefined
    num_neighbors: torch.Tensor  # int64
    std: torch.Tensor  # float64, NaN where undefined
    covered: torch.Tensor  # bool
    estimator: str = "threshold"
    neighbors: Neighbors | None = None
    nearest: torch.Tensor | None = None  # float64 [batch]: the highest similarity to a training text
    outside: torch.Tensor | None = None  # bool [batch]: outside the training distribution
    typicality: torch.Tensor | None = None  # float64 [batch]: the p-value `outside` and the weights come from

    def numpy(self) -> Prediction:
        return Prediction(
            scores=self.scores.cpu().numpy(),
            num_neighbors=self.num_neighbors.cpu().numpy(),
            std=self.std.cpu().numpy(),
            covered=self.covered.cpu().numpy(),
            estimator=self.estimator,
            neighbors=self.neighbors,
            nearest=None if self.nearest is None else self.nearest.cpu().numpy(),
            outside=None if self.outside is None else self.outside.cpu().numpy(),
            typicality=None if self.typicality is None else self.typicality.cpu().numpy(),
        )

    def __len__(self) -> int:
        return int(self.scores.numel())


def is_covered(
    count: torch.Tensor,
    num_train: int,
    min_neighbors: int | torch.Tensor,
    max_fraction: float | torch.Tensor,
) -> torch.Tensor:
    """The paper's rule: an estimate exists when a <= |N(x)| <= b |S| (a and b may be columns
    of a grid, as tuning asks for every (a, b) at once)."""
    return (count >= min_neighbors) & (count <= max_fraction * num_train)


def estimate(
    stats: NeighborStats,
    quality: Quality,
    num_train: int,
    min_neighbors: int,
    max_fraction: float,
) -> Prediction:
    """Mean q of the neighbours where the a/b rule allows an estimate, NaN elsewhere; `std` is
    the population standard deviation of the neighbours' q (a confidence the paper lacks)."""
    return estimate_tensors(stats, quality, num_train, min_neighbors, max_fraction).numpy()


def estimate_tensors(
    stats: NeighborStats,
    quality: Quality,
    num_train: int,
    min_neighbors: int,
    max_fraction: float,
) -> TensorPrediction:
    """`estimate` without leaving the device (no host copy, no sync). Weighted statistics give
    the weighted mean and the weighted spread."""
    covered = is_covered(stats.count, num_train, min_neighbors, max_fraction)
    mean, std = moments(stats, quality)
    nan = torch.full_like(mean, float("nan"))
    return TensorPrediction(
        scores=torch.where(covered, mean, nan),
        num_neighbors=stats.count,
        std=torch.where(covered, std, nan),
        covered=covered,
    )


def weighted_mean(weight: torch.Tensor, total: torch.Tensor, quality: Quality) -> torch.Tensor:
    """The (weighted) mean of the neighbours' q from their exact sums, `NeighborStats.weight`
    [rows, bands] and `.total` [rows, bands, limbs], band by band in the bands' order (0 where
    no neighbour): `moments`' mean, alone for callers that rank estimates and need no spread
    (nested tuning)."""
    denominator = weight.to(torch.float64).sum(dim=1).clamp(min=1)  # exact: integers below 2^53
    mean = torch.zeros_like(denominator)
    for index, band in enumerate(quality.bands):
        mean = mean + decode_limbs(total[:, index], MANTISSA_BITS // total.shape[2], band.values_shift, denominator)
    return mean


def moments(stats: NeighborStats, quality: Quality) -> tuple[torch.Tensor, torch.Tensor]:
    """The (weighted) mean and population standard deviation of the neighbours' q from exact
    limb sums, each decoded in one fixed sequence of operations (finite where any neighbour).

    Each band (`Quality`) gives its share of the mean and its own mean and spread (that of its
    deviations d, E[d^2] - E[d]^2, scaled back). A row whose neighbours lie in one band takes
    that band's spread. Neighbours in several bands combine, in the bands' fixed order, as
    parallel variances do: Var = sum_b w_b / W (Var_b + (mean_b - mean)^2), in units of the
    magnitude of the largest band present, which the spread then cannot fall far below."""
    weight = stats.weight.to(torch.float64)
    denominator = weight.sum(dim=1).clamp(min=1)  # exact: integers below 2^53
    bits = stats.limb_bits
    mean = weighted_mean(stats.weight, stats.total, quality)
    means, spreads = [], []
    for index, band in enumerate(quality.bands):
        share = weight[:, index].clamp(min=1)
        band_mean = decode_limbs(stats.total[:, index], bits, band.values_shift, share)
        second = decode_limbs(stats.total_sq[:, index], bits, band.squares_shift, share)
        offset = times_power_of_two(band_mean - band.centre, -band.scale)
        means.append(band_mean)
        spreads.append((second - offset * offset).clamp(min=0))  # in units of 4^scale
    present = stats.weight > 0
    std = torch.zeros_like(denominator)
    for top, reference in enumerate(quality.bands):
        largest = present[:, top] & ~present[:, :top].any(dim=1)
        alone = largest & ~present[:, top + 1 :].any(dim=1)
        std = torch.where(alone, times_power_of_two(rounded_sqrt(spreads[top]), reference.scale), std)
        if top + 1 == len(quality.bands):
            break
        unit = MANTISSA_BITS - reference.values_shift  # the binary exponent of the band's largest |q|
        variance = torch.zeros_like(denominator)
        for index in range(top, len(quality.bands)):
            spread = times_power_of_two(spreads[index], 2 * (quality.bands[index].scale - unit))
            apart = times_power_of_two(means[index] - mean, -unit)
            variance = variance + weight[:, index] / denominator * (spread + apart * apart)
        std = torch.where(largest & ~alone, times_power_of_two(rounded_sqrt(variance.clamp(min=0)), unit), std)
    return mean, std
