"""The model store: names, the catalogue, content-addressed blobs, manifests and verified downloads."""
