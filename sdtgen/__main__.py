import sys

from sdtgen.cli import main

sys.exit(main())
