"""Index storage, by concern: :mod:`.commit` (generations, the commit point), :mod:`.lock`,
:mod:`.checksum`, :mod:`.durable`, :mod:`.arrays`, :mod:`.validate`, :mod:`.strings`."""
from .checksum import HASH, VERIFY_LEVELS, file_digest, verify_files
from .durable import fsync_dir, fsync_tree, write_file_durably, write_json
from .lock import Lease, WriteLock
from .commit import IndexWriter, TargetGuard, check_target, cleanup, current_generation, has_index, is_index_dir, new_manifest, open_index, read_current, read_manifest, rebuild_command
from .layout import CURRENT, FORMAT_NAME, FORMAT_VERSION, GEN_PREFIX, LEGACY_NAMES, LOCK_FILE, MANIFEST, READERS_FILE
from .arrays import RowReader, SAVE_BLOCK_BYTES, check_array, load_array, load_arrays, read_rows, release_pages, save_array, save_arrays
from .validate import UNIT_CHECK_FULL, UNIT_CHECK_SAMPLE, UNIT_TOL, check_finite, check_ids, check_indptr, check_unit_rows
from .strings import check_packed, check_utf8, pack_strings, unpack_strings

__all__ = [
    "CURRENT",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "GEN_PREFIX",
    "HASH",
    "IndexWriter",
    "LEGACY_NAMES",
    "LOCK_FILE",
    "Lease",
    "MANIFEST",
    "READERS_FILE",
    "RowReader",
    "SAVE_BLOCK_BYTES",
    "TargetGuard",
    "UNIT_CHECK_FULL",
    "UNIT_CHECK_SAMPLE",
    "UNIT_TOL",
    "VERIFY_LEVELS",
    "WriteLock",
    "check_array",
    "check_finite",
    "check_ids",
    "check_indptr",
    "check_packed",
    "check_target",
    "check_unit_rows",
    "check_utf8",
    "cleanup",
    "current_generation",
    "file_digest",
    "fsync_dir",
    "fsync_tree",
    "has_index",
    "is_index_dir",
    "load_array",
    "load_arrays",
    "new_manifest",
    "open_index",
    "pack_strings",
    "read_current",
    "read_manifest",
    "read_rows",
    "rebuild_command",
    "release_pages",
    "save_array",
    "save_arrays",
    "unpack_strings",
    "verify_files",
    "write_file_durably",
    "write_json",
]
