"""Exit codes shared by the entry point and `run`: a leaf module, so neither imports the other."""

INTERRUPTED = 130  # the shell's code for a command ended by Ctrl-C (128 + SIGINT)
