"""What detection needs of the rest mesh, built once per model: each
triangle's ring (the vertices near its corners) and connected component, and the patches of the patch
broad phase (with their far triangle pairs and their vertices)."""

import numpy as np
from numba import njit

from ..jit import PLAIN



@njit(**PLAIN)
def _root(parent, a):
    """Union-find root of a, halving the path on the way."""
    while parent[a] != a:
        parent[a] = parent[parent[a]]
        a = parent[a]
    return a


@njit(**PLAIN)
def triangle_components(triangles, n):
    """Each triangle's connected component (over shared vertices): the
    label of a union-find root, int32. Triangles of different components
    are never near each other."""
    parent = np.arange(n)
    for t in range(triangles.shape[0]):
        for k in (1, 2):
            a = _root(parent, triangles[t, 0])
            b = _root(parent, triangles[t, k])
            parent[max(a, b)] = min(a, b)
    comp = np.empty(triangles.shape[0], np.int32)
    for t in range(triangles.shape[0]):
        comp[t] = _root(parent, triangles[t, 0])
    return comp


@njit(**PLAIN)
def triangle_rings(triangles, adj_start, adj, n):
    """Per triangle, every vertex equal or adjacent to one of its corners (CSR),
    over the adjacency given (SelfCollision passes its near adjacency: the
    short edges only).

    A triangle whose corners are all outside this set is not near it."""
    nt = triangles.shape[0]
    mark = np.full(n, -1, np.int64)
    start = np.zeros(nt + 1, np.int64)
    for t in range(nt):
        cnt = 0
        for k in range(3):
            v = triangles[t, k]
            if mark[v] != t:
                mark[v] = t
                cnt += 1
            for j in range(adj_start[v], adj_start[v + 1]):
                w = adj[j]
                if mark[w] != t:
                    mark[w] = t
                    cnt += 1
        start[t + 1] = start[t] + cnt
    mark[:] = -1
    ring = np.empty(start[nt], np.int32)
    for t in range(nt):
        q = start[t]
        for k in range(3):
            v = triangles[t, k]
            if mark[v] != t:
                mark[v] = t
                ring[q] = v
                q += 1
            for j in range(adj_start[v], adj_start[v + 1]):
                w = adj[j]
                if mark[w] != t:
                    mark[w] = t
                    ring[q] = w
                    q += 1
    return start, ring


@njit(**PLAIN)
def build_patches(triangles, tri_edges, n_edges, n, seed_order, cell, max_size, min_size):
    """Patches: connected triangles of one cell of a grid over the rest
    shape (cell: per triangle), grown breadth-first from seeds in
    seed_order, at most max_size triangles each; a patch under min_size
    (a sliver a cell boundary cut off) joins the smallest patch it shares an
    edge with. Returns pstart, ptris (CSR of triangles per patch) and
    nstart, nbr (CSR of the patches sharing a vertex with each, sorted,
    itself excluded)."""
    nt = triangles.shape[0]
    # edge -> triangles CSR
    deg = np.zeros(n_edges + 1, np.int64)
    for t in range(nt):
        for k in range(3):
            deg[tri_edges[t, k] + 1] += 1
    for e in range(n_edges):
        deg[e + 1] += deg[e]
    fill = deg[:-1].copy()
    etri = np.empty(deg[n_edges], np.int64)
    for t in range(nt):
        for k in range(3):
            e = tri_edges[t, k]
            etri[fill[e]] = t
            fill[e] += 1
    patch_of = np.full(nt, -1, np.int64)
    ptris = np.empty(nt, np.int32)
    pstart = np.zeros(nt + 1, np.int64)
    queue = np.empty(nt, np.int64)
    np_ = 0
    q = 0
    for s in range(nt):
        seed = seed_order[s]
        if patch_of[seed] >= 0:
            continue
        head = 0
        tail = 0
        queue[tail] = seed
        tail += 1
        patch_of[seed] = np_
        size = 0
        cs = cell[seed]
        while head < tail and size < max_size:
            t = queue[head]
            head += 1
            ptris[q] = t
            q += 1
            size += 1
            for k in range(3):
                e = tri_edges[t, k]
                for j in range(deg[e], deg[e + 1]):
                    u = etri[j]
                    if patch_of[u] < 0 and cell[u] == cs and tail - head + size < max_size:
                        patch_of[u] = np_
                        queue[tail] = u
                        tail += 1
        # Queued but not taken (cannot happen with the bound above, kept safe).
        for j in range(head, tail):
            patch_of[queue[j]] = -1
        np_ += 1
        pstart[np_] = q
    # Slivers join a neighbour across an edge (one pass, smallest first).
    size_of = np.diff(pstart[:np_ + 1])
    label = np.arange(np_)
    for p in np.argsort(size_of, kind="mergesort"):
        if size_of[p] >= min_size:
            break
        best = -1
        for j in range(pstart[p], pstart[p + 1]):
            t = ptris[j]
            for k in range(3):
                e = tri_edges[t, k]
                for i in range(deg[e], deg[e + 1]):
                    o = patch_of[etri[i]]
                    while label[o] != o:   # where that patch went, if it joined another
                        o = label[o]
                    if o != p and (best < 0 or size_of[o] < size_of[best]):
                        best = o
        if best >= 0:
            label[p] = best
            size_of[best] += size_of[p]
            size_of[p] = 0
    # Follow chains (a sliver joined one that joined another), renumber
    # densely, regroup the triangles keeping their breadth-first order.
    for p in range(np_):
        r = p
        while label[r] != r:
            r = label[r]
        label[p] = r
    dense = np.full(np_, -1, np.int64)
    m = 0
    for p in range(np_):
        if label[p] == p:
            dense[p] = m
            m += 1
    cnt = np.zeros(m + 1, np.int64)
    for t in range(nt):
        patch_of[t] = dense[label[patch_of[t]]]
        cnt[patch_of[t] + 1] += 1
    for p in range(m):
        cnt[p + 1] += cnt[p]
    old = ptris[:q].copy()
    fill2 = cnt[:m].copy()
    for j in range(q):
        t = old[j]
        ptris[fill2[patch_of[t]]] = t
        fill2[patch_of[t]] += 1
    np_ = m
    pstart[:m + 1] = cnt
    # patch neighbours: patches sharing a vertex (CSR, sorted, self excluded)
    vdeg = np.zeros(n + 1, np.int64)
    for t in range(nt):
        for k in range(3):
            vdeg[triangles[t, k] + 1] += 1
    for v in range(n):
        vdeg[v + 1] += vdeg[v]
    vfill = vdeg[:-1].copy()
    vtri = np.empty(vdeg[n], np.int64)
    for t in range(nt):
        for k in range(3):
            v = triangles[t, k]
            vtri[vfill[v]] = t
            vfill[v] += 1
    mark = np.full(np_, -1, np.int64)
    nstart = np.zeros(np_ + 1, np.int64)
    tmp = np.empty(0, np.int64)
    lists = []
    for p in range(np_):
        found = []
        for j in range(pstart[p], pstart[p + 1]):
            t = ptris[j]
            for k in range(3):
                v = triangles[t, k]
                for i in range(vdeg[v], vdeg[v + 1]):
                    o = patch_of[vtri[i]]
                    if o != p and mark[o] != p:
                        mark[o] = p
                        found.append(o)
        arr = np.array(found, dtype=np.int64) if len(found) else tmp
        arr = np.sort(arr)
        lists.append(arr)
        nstart[p + 1] = nstart[p] + arr.shape[0]
    nbr = np.empty(nstart[np_], np.int32)
    for p in range(np_):
        nbr[nstart[p]:nstart[p + 1]] = lists[p]
    return pstart[:np_ + 1].copy(), ptris, nstart, nbr


@njit(**PLAIN)
def patch_far_pairs(pstart, ptris, triangles, ring_start, ring, n):
    """For every triangle slot ja of a patch (an index into ptris), the later
    slots jb of the same patch whose triangle is not near its own (outside
    its ring) (CSR over slots: fpair[fstart[ja]:fstart[ja + 1]]). Only these
    pairs can make contacts inside a patch, and they are a small part of its
    pairs: detection walks them instead of box-testing every pair of the
    patch and rejecting the neighbours one by one."""
    npatch = pstart.shape[0] - 1
    ns = ptris.shape[0]
    mark = np.full(n, -1, np.int64)
    fstart = np.zeros(ns + 1, np.int64)
    for rep in range(2):
        if rep == 1:
            for j in range(ns):
                fstart[j + 1] += fstart[j]
            fpair = np.empty(fstart[ns], np.int32)   # slots (< 2**31): half the memory
        for p in range(npatch):
            for ja in range(pstart[p], pstart[p + 1]):
                a = ptris[ja]
                for q_ in range(ring_start[a], ring_start[a + 1]):
                    mark[ring[q_]] = a
                m = fstart[ja] if rep == 1 else 0
                for jb in range(ja + 1, pstart[p + 1]):
                    b = ptris[jb]
                    if mark[triangles[b, 0]] != a and mark[triangles[b, 1]] != a and mark[triangles[b, 2]] != a:
                        if rep == 1:
                            fpair[m] = jb
                        m += 1
                if rep == 0:
                    fstart[ja + 1] = m
    return fstart, fpair


@njit(**PLAIN)
def patch_vertices(pstart, ptris, triangles, n):
    """Per patch its distinct vertices (CSR: pverts[pvstart[p]:pvstart[p + 1]])
    and per triangle its patch."""
    npatch = pstart.shape[0] - 1
    nt = triangles.shape[0]
    patch_of = np.empty(nt, np.int32)
    mark = np.full(n, -1, np.int64)
    pvstart = np.zeros(npatch + 1, np.int64)
    pverts = np.empty(3 * ptris.shape[0], np.int32)
    q = 0
    for p in range(npatch):
        for j in range(pstart[p], pstart[p + 1]):
            t = ptris[j]
            patch_of[t] = p
            for k in range(3):
                v = triangles[t, k]
                if mark[v] != p:
                    mark[v] = p
                    pverts[q] = v
                    q += 1
        pvstart[p + 1] = q
    return pvstart, pverts[:q].copy(), patch_of
