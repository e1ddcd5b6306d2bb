"""The reference server's endpoints, one ``APIRouter`` per family; ``refserver/app.py::create_app`` mounts them."""
