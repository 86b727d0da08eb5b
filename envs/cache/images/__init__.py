"""Container images without a container runtime: OCI/Docker images become content-addressed swebox layers.

``sources`` reads an OCI image layout or a ``docker save`` tarball, ``registry`` pulls from a Docker Registry
HTTP API v2 registry (with skopeo), ``convert`` turns each layer into a store layer keyed by its digest,
``records`` keeps the images of a store, and ``runtime`` gives a sandbox an image's stack and environment.
See docs/cache.md, "Images".
"""

from .convert import LayerBlob, LayerDigestError, convert_layer, layer_key
from .records import ImageRecord, get_image, import_image, list_images, remove_image, require_image
from .runtime import ImageConfigError, ImageLayers, acquire_image, image_policy, image_sandbox
from .sources import ImageSource, ImageSourceError, Platform, docker_archive, oci_layout

__all__ = [
    "ImageConfigError",
    "ImageLayers",
    "ImageRecord",
    "ImageSource",
    "ImageSourceError",
    "LayerBlob",
    "LayerDigestError",
    "Platform",
    "acquire_image",
    "convert_layer",
    "docker_archive",
    "get_image",
    "image_policy",
    "image_sandbox",
    "import_image",
    "layer_key",
    "list_images",
    "oci_layout",
    "remove_image",
    "require_image",
]
