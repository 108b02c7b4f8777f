import sys

from overlapscope.cli import main

sys.exit(main())
