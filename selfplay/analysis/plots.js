// Draw every figure of an analysis page (figures-data: {div id: plotly figure}).
(function(){
  const figures = JSON.parse(document.getElementById('figures-data').textContent);
  const jobs = Object.entries(figures).map(([id, fig]) =>
    Plotly.newPlot(id, fig.data, fig.layout, {responsive: true, displaylogo: false}));
  Promise.all(jobs).then(() => { document.body.dataset.plotsRendered = String(jobs.length); });
})();
