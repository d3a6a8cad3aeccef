"""``migrate_manifest_paths_v2``: rename V1 manifests (``{version}.manifest``) to V2 names.

As Lance's ``migrate_scheme_to_v2``: every V1-named manifest of ``_versions/`` gets the V2
name of its version; nothing else changes. Idempotent; like Lance's, it must not run while
other writers commit. A store without rename copies, then deletes the V1 name, so an
interruption leaves both names of a version (readers prefer the V2 one) and a rerun finishes.
"""

from __future__ import annotations

from airflow_lance.core import layout
from airflow_lance.core.errors import UnsupportedFeatureError
from airflow_lance.core.storage import ObjectStore


def migrate_manifest_paths_v2(store: ObjectStore) -> list[int]:
    """Rename every V1 manifest to its V2 name; return the versions renamed."""
    if store.external_manifests is not None:
        raise UnsupportedFeatureError(
            f"{store.uri} commits through an external manifest store: its manifest names are not migrated here")
    renamed = []
    for name in store.list_names(layout.VERSIONS_DIR):
        parsed = layout.parse_manifest_name(name)
        if parsed is None or parsed[1] is not layout.ManifestNamingScheme.V1:
            continue
        version = parsed[0]
        source = layout.manifest_path(version, layout.ManifestNamingScheme.V1)
        target = layout.manifest_path(version, layout.ManifestNamingScheme.V2)
        if not store.exists(target):
            store.copy(source, target)
        store.delete(source)
        renamed.append(version)
    return sorted(renamed)
