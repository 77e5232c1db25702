"""Coarser drawn meshes for fast offscreen renders (`extra['render_mesh_grid']`).

On a software renderer (Mesa llvmpipe) a small MetaWorld image's cost grows with the mesh triangles drawn (hiding
the gripper's 12k of them saves about 2 ms of a 9 ms 64 px render): the Sawyer arm's ~30k take most of it. `simplify_drawn_meshes` redraws every mesh with its
vertices merged on a grid (vertex clustering): each occupied grid cell keeps one of its own vertices, triangles
collapsed by the merge are dropped. Only the faces the renderer draws change (`mesh_face`, `mesh_facenormal`,
`mesh_facetexcoord`, `mesh_facenum`); vertex positions, convex hulls, masses and inertias stay as compiled, so
the physics is bit for bit the same. Call it before the model's `mujoco.Renderer` is made (the renderer uploads
the meshes once).
"""

from __future__ import annotations

from typing import Any

import numpy as np


def cluster_faces(verts: np.ndarray, faces: np.ndarray, grid: float) -> np.ndarray:
    """Faces int [K, 3] of a mesh redrawn with its vertices merged on a `grid`-metre grid.

    Each occupied cell is represented by its face-used vertex nearest to the cell's vertex mean; a face keeps its
    orientation; faces whose corners merge into fewer than three cells and repeats of a face are dropped.

    Args:
        verts: float [V, 3] vertex positions (metres).
        faces: int [F, 3] vertex indices of the triangles.
        grid: the cell size in metres (> 0).
    """
    return cluster_faces_with_sources(verts, faces, grid)[0]


def cluster_faces_with_sources(
    verts: np.ndarray, faces: np.ndarray, grid: float
) -> tuple[np.ndarray, np.ndarray]:
    """`cluster_faces` and, for each kept face, the index int [K] of the original face it is drawn from."""
    keys = np.floor(np.asarray(verts, dtype=np.float64) / grid).astype(np.int64)
    _, cell, counts = np.unique(keys, axis=0, return_inverse=True, return_counts=True)
    cell = cell.reshape(-1)
    sums = np.zeros((counts.size, 3))
    np.add.at(sums, cell, verts)
    dist = np.linalg.norm(verts - (sums / counts[:, None])[cell], axis=1)
    used = np.zeros(len(keys), dtype=bool)
    used[np.asarray(faces).reshape(-1)] = True
    dist[~used] = np.inf  # a vertex no face uses has no normal to draw with: never a cell's representative
    order = np.lexsort((dist, cell))  # by cell, nearest to the cell's mean first
    first = np.ones(order.size, dtype=bool)
    first[1:] = cell[order][1:] != cell[order][:-1]
    representative = np.empty(counts.size, dtype=np.int64)
    representative[cell[order][first]] = order[first]
    merged = representative[cell[faces]]
    kept = np.flatnonzero(
        (merged[:, 0] != merged[:, 1]) & (merged[:, 1] != merged[:, 2]) & (merged[:, 0] != merged[:, 2])
    )
    _, unique = np.unique(np.sort(merged[kept], axis=1), axis=0, return_index=True)
    sources = kept[np.sort(unique)]
    return np.asarray(merged[sources], dtype=np.int64), sources


#: Where a redrawn face's corner normals and texture coordinates come from (`simplify_drawn_meshes`).
CORNER_SOURCES = ("vertex", "face")


def simplify_drawn_meshes(model: Any, grid: float, *, corners: str = "vertex") -> tuple[int, int]:
    """Redraw every mesh of a compiled `mujoco.MjModel` in place with `cluster_faces` at `grid` metres.

    `corners="vertex"`: each new face corner takes the normal (and texture coordinate) its vertex had in the original
    faces (one per vertex). `corners="face"`: each new face keeps the corner normals and texture coordinates of the
    original face it is drawn from, so flat sides of meshes whose faces share no vertices (boxes exported one
    vertex per face corner, LIBERO's furniture) keep their own normal and shading.

    Returns:
        (triangles before, triangles after) over all meshes.
    """
    if corners not in CORNER_SOURCES:
        raise ValueError(f"corners={corners!r} is invalid: one of {CORNER_SOURCES}")
    before = after = 0
    for mesh in range(model.nmesh):
        vert_adr, vert_num = int(model.mesh_vertadr[mesh]), int(model.mesh_vertnum[mesh])
        face_adr, face_num = int(model.mesh_faceadr[mesh]), int(model.mesh_facenum[mesh])
        faces = np.array(model.mesh_face[face_adr : face_adr + face_num], dtype=np.int64)
        verts = model.mesh_vert[vert_adr : vert_adr + vert_num]
        new, sources = cluster_faces_with_sources(verts, faces, grid)
        k = len(new)
        corner_arrays = [model.mesh_facenormal]
        if int(model.mesh_texcoordadr[mesh]) >= 0:
            corner_arrays.append(model.mesh_facetexcoord)
        for per_corner in corner_arrays:
            original = np.array(per_corner[face_adr : face_adr + face_num])
            if corners == "face":
                per_corner[face_adr : face_adr + k] = original[sources]
                continue
            of_vertex = np.zeros(vert_num, dtype=np.int64)
            of_vertex[faces.reshape(-1)] = original.reshape(-1)
            per_corner[face_adr : face_adr + k] = of_vertex[new]
        model.mesh_face[face_adr : face_adr + k] = new
        model.mesh_facenum[mesh] = k
        before += face_num
        after += k
    return before, after
