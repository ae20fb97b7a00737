import sys

from .story import main

sys.exit(main())
