from maya.cli import app

app()
