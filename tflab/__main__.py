import sys

from tflab.cli import main

sys.exit(main())
