"""Map the fixed folders onto one namespaced import tree.

shared/   -> jidocode.shared        services/ -> jidocode.services
client/   -> jidocode.client        cli/      -> jidocode.cli

Nothing generic (``shared``, ``services``) is installed at the top level of
site-packages, so the project installs cleanly beside anything.
"""

from setuptools import find_namespace_packages, setup

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
