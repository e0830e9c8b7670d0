"""The model store: names, the catalogue, content-addressed blobs, manifests and verified downloads.

    from localrun.store import Store
    model = Store().pull("smollm2")        # a fast no-op when present
    llama_path = Store().resolve("smollm2").path

Errors are the classes in `localrun.errors` (InvalidName, ModelNotFound, StoreError and the
DownloadError family); every one carries a single readable line.
"""

from localrun.store.catalogue import Catalogue, Entry, load_catalogue
from localrun.store.download import Policy
from localrun.store.model import Facts, Model, ModelInfo, PullProgress
from localrun.store.modelfile import Modelfile, modelfile_of, parse_modelfile
from localrun.store.names import Name, Reference, parse_name, parse_reference
from localrun.store.store import Store
from localrun.store.uploads import BlobUpload, blob_digest

__all__ = [
    "BlobUpload", "Catalogue", "Entry", "Facts", "Model", "ModelInfo", "Modelfile", "Name", "Policy", "PullProgress",
    "Reference", "Store", "blob_digest", "load_catalogue", "modelfile_of", "parse_modelfile", "parse_name",
    "parse_reference",
]
