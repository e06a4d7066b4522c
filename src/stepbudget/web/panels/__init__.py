"""The chapter's seven panels, in its order: each module has PID, CONTROLS, layout(lang, state) and register(app)."""

from stepbudget.web.panels import p51, p52, p53, p54, p55, p56, p57

PANELS = (p51, p52, p53, p54, p55, p56, p57)
