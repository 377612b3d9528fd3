"""Whole-store operations: export, import and copy (:mod:`~sessionstore.ops.transfer`), and the
doctor's check and repair (:mod:`~sessionstore.ops.doctor`)."""
