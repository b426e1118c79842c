from zocratesd.cli import main

raise SystemExit(main())
