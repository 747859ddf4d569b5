"""One module per API family. A handler is ``async (ctx, conn, header, request) -> response | None``."""
