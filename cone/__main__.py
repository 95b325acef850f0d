# The one import from the base up to the entry layer: `python -m cone` must run the command line.
from cone.cli import main

raise SystemExit(main())
