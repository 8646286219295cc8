"""A 'framework' that is harmless itself (tests of arrayport.cli.isolation's reordering)."""
