"""Reading run folders and drawing analysis pages (``selfplay analyze``).

``rundata`` reads whatever a run folder holds (a killed run included); ``sections`` turns it
into titled figures and tables with the metric functions of ``curricula.analysis``; ``plots``
draws each figure twice (a PNG for papers, an interactive uPlot chart for the page); ``page``
writes the self-contained HTML page. See docs/analysis.md.
"""
