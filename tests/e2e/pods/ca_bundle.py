"""Checks an image's CA bundle against the pinned one (image/ca-bundle.env) and the build host's.

Usage: ca_bundle.py IMAGE_BUNDLE WHEEL SHA256 HOST_BUNDLE

WHEEL is the pinned certifi wheel, SHA256 its pinned digest. The image's bundle must be the
wheel's certifi/cacert.pem byte for byte, and hold none of the host's CAs that are not in it
(a host's local additions). Prints one line saying so; exits 1 with the reason otherwise.
"""

import base64
import hashlib
import re
import sys
import zipfile

PEM = re.compile(rb"-----BEGIN CERTIFICATE-----\s+(.+?)\s+-----END CERTIFICATE-----", re.S)


def certificates(pem):
    """The DER bytes of every certificate in a PEM bundle."""
    return [base64.b64decode(b"".join(body.split())) for body in PEM.findall(pem)]


def main(image_path, wheel_path, sha256, host_path):
    wheel = open(wheel_path, "rb").read()
    digest = hashlib.sha256(wheel).hexdigest()
    if digest != sha256:
        sys.exit(f"{wheel_path} has sha256 {digest}, not the pinned {sha256}")
    with zipfile.ZipFile(wheel_path) as archive:
        pinned = archive.read("certifi/cacert.pem")
    image = open(image_path, "rb").read()
    if image != pinned:
        sys.exit(
            f"the image's CA bundle ({len(image)} bytes, sha256 {hashlib.sha256(image).hexdigest()}) "
            f"is not the pinned certifi/cacert.pem ({len(pinned)} bytes, sha256 {hashlib.sha256(pinned).hexdigest()})"
        )
    in_image = set(certificates(image))
    host_only = set(certificates(open(host_path, "rb").read())) - set(certificates(pinned))
    leaked = host_only & in_image
    if leaked:
        sys.exit(f"the image trusts {len(leaked)} CA(s) of the build host that are not in the pinned set")
    print(
        f"{len(in_image)} CAs, the pinned certifi/cacert.pem byte for byte "
        f"(sha256 {hashlib.sha256(image).hexdigest()[:16]}); {len(host_only)} CA(s) of this host's "
        f"{host_path} not in the pinned set, none in the image"
    )


if __name__ == "__main__":
    main(*sys.argv[1:])
