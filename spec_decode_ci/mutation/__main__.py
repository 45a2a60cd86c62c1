import sys

from spec_decode_ci.mutation.run import main

sys.exit(main())
