from cone.cli import main

raise SystemExit(main())
