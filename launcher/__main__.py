from launcher.cli.main import main

raise SystemExit(main())
