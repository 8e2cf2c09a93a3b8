// Types for the uPlot module the console server serves as vendor/uplot.js (node_modules/uplot).
import uPlot from 'uplot';
export default uPlot;
