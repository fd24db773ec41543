"""DMAR (SPEC §3): the pipeline and what only it uses."""
