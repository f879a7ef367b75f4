import sys

from tsctl.cli import main

sys.exit(main())
