import sys

from kuiper.cli import main

sys.exit(main())
