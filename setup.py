"""Map the fixed folders onto one namespaced import tree.

shared/   -> jidocode.shared        services/ -> jidocode.services
client/   -> jidocode.client        cli/      -> jidocode.cli

Nothing generic (``shared``, ``services``) is installed at the top level of
site-packages, so the project installs cleanly beside anything.
"""

import warnings

from setuptools import find_namespace_packages, setup
from setuptools.warnings import InformationOnly

# An editable install of this mapping goes through setuptools' meta path finder, which then
# prints a box asking to beware of a folder named like the package in the working directory
# (pip shows it even with --quiet). The project has no ``jidocode/`` folder: the box only hides
# real messages, so it is silenced here, and only it.
warnings.filterwarnings("ignore", message="Editable installation", category=InformationOnly)

FOLDERS = {
    "shared": "jidocode.shared",
    "services": "jidocode.services",
    "client": "jidocode.client",
    "cli": "jidocode.cli",
}


def _packages() -> tuple[list[str], dict[str, str]]:
    packages: list[str] = []
    package_dir: dict[str, str] = {}
    for folder, prefix in FOLDERS.items():
        package_dir[prefix] = folder
        packages.append(prefix)
        for sub in find_namespace_packages(folder, exclude=["*__pycache__*"]):
            packages.append(f"{prefix}.{sub}")
    return packages, package_dir


PACKAGES, PACKAGE_DIR = _packages()

setup(
    packages=PACKAGES,
    package_dir=PACKAGE_DIR,
    package_data={"": ["*.json", "*.md", "*.yaml", "*.conf", "py.typed", "*.html", "*.js", "*.css"]},
)
