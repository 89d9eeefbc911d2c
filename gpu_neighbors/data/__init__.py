"""Files in and out: streaming readers with file:line:field errors, one safe way to write any
output (`SafeOutput`), and a resumable writer built on it."""
from gpu_neighbors.data.errors import InputError, PathLike
from gpu_neighbors.data.formats import FORMATS, count_records, detect_format
from gpu_neighbors.data.output import SafeOutput, check_outputs
from gpu_neighbors.data.readers import Candidate, CandidateBatch, CandidateStream, ScoredData, iter_candidates, read_scored
from gpu_neighbors.data.writer import ParquetResultWriter, ResultWriter, open_results

__all__ = [
    "FORMATS", "Candidate", "CandidateBatch", "CandidateStream", "InputError", "ParquetResultWriter", "PathLike",
    "ResultWriter", "SafeOutput", "ScoredData", "check_outputs", "count_records", "detect_format",
    "iter_candidates", "open_results", "read_scored",
]
