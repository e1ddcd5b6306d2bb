"""The reference server's endpoints, one ``APIRouter`` per family; ``refserver.app.create_app`` mounts them."""
