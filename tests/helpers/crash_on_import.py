"""A 'library' whose import kills the process (tests of arrayport.cli.isolation)."""
import os

os.abort()
