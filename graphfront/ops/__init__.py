"""The op library: the registry, the user-op builder and one module per op family.

:mod:`graphfront.ops.families` imports every family (``import graphfront`` does so first);
see :mod:`graphfront.ops.registry`.
"""
