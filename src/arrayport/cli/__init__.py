"""The ``arrayport`` command's machinery: ``matrix`` (an interop matrix of the array libraries
installed) and ``check`` (a DLPack conformance run against any array library).

Nothing here is imported by ``import arrayport``. Array libraries are imported only in a
worker process (:mod:`arrayport.cli.isolation`), so a library that crashes, hangs or fails to
import is reported, never suffered by the command itself.
"""
