from nexus.cli import main

raise SystemExit(main())
