import sys

from spec_decode_ci.generator.cli import main

sys.exit(main())
