"""All-pairs jobs beside the neighbour estimate: Self-BLEU of a set, MBR expected utility, and
the full similarity matrix, each a reduction over the kernels' tiles."""
