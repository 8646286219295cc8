"""Each library's cases for the ``arrayport`` command and the tests: how the interop matrix
makes and takes its arrays, its unusual arrays, how ``arrayport check`` drives it, how to
read a result it returns — one module per library (``_<name>.py``), apart from its runtime
adapter (``arrayport.libraries._<name>``: the converters ``arrayport.to`` and the core ask
for), so that converting an array loads none of this. ``arrayport.libraries.Library.get``
reads each name from the half that owns it.

The cases half (the command's and the tests'); the converters are
``arrayport.libraries.__init__``."""
