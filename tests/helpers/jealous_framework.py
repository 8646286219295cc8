"""A 'framework' whose import kills the process when rival_framework was imported first, as
PaddlePaddle 3.3 dies importing after TensorFlow 2.21 (tests of arrayport.cli.isolation)."""
import os
import sys

if "rival_framework" in sys.modules:
    os.abort()
