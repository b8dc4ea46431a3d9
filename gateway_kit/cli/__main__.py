from gateway_kit.cli import main

raise SystemExit(main())
