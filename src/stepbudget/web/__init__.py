"""The chapter's panels as a local web app (``stepbudget serve``): web/app.py builds it, web/panels/ holds one
module per panel, views/catalogs/ the words in each language."""
