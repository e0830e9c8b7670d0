"""Model-store commands: pull, list, show, rm, cp. They work without a daemon."""
