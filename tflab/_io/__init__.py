"""What tflab reads and writes on disk, and what it prints while it works: input-path checks, output paths
(exclusive publishing), the marker of every folder output, the progress line."""
