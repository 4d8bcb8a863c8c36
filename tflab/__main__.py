import sys

from tflab.cli import supervise

sys.exit(supervise())
