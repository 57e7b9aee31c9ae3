import sys

from kuiper.app.cli import main

sys.exit(main())
