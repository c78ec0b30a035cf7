from memfs.cli import main

raise SystemExit(main())
