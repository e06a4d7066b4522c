"""The chapter's panels as a local web app (``stepbudget serve``): web/app.py builds it, web/panels/ holds one
module per panel, web/catalogs/ the words in each language."""
